package cli

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// setting is one configuration value of a command, read from a flag or else from the environment.
type setting struct {
	spec
	value string
	set   bool // given by flag
}

// settings are the settings of one command, in the order of settingTable.
type settings struct {
	cmd  string
	list []*setting
	file *configFile // the config file, once resolve has read it
}

// newSettings returns the settings settingTable gives cmd.
func newSettings(cmd string) settings {
	s := settings{cmd: cmd}
	for _, sp := range specsOf(cmd) {
		s.list = append(s.list, &setting{spec: sp})
	}
	return s
}

// get returns the setting of the flag name. It panics when settingTable does not give it to this
// command: every test of the command's --help finds that mistake.
func (s *settings) get(name string) *setting {
	if st := s.find(name); st != nil {
		return st
	}
	panic(fmt.Sprintf("walbox %s takes no --%s: add it to settingTable", s.cmd, name))
}

// find returns the setting of the flag name, or nil when this command does not take it.
func (s *settings) find(name string) *setting {
	for _, st := range s.list {
		if st.flag == name {
			return st
		}
	}
	return nil
}

// register adds every setting to fs; a flag wins over its environment variable.
func (s *settings) register(fs *flag.FlagSet) {
	for _, st := range s.list {
		st := st
		set := func(v string) error {
			st.value, st.set = v, true
			return nil
		}
		if st.isBool {
			fs.BoolFunc(st.flag, st.usage(), set)
		} else {
			fs.Func(st.flag, st.usage(), set)
		}
	}
}

func defaultNote(def string) string {
	if def == "" {
		return ""
	}
	return " (default " + strconv.Quote(def) + ")"
}

// resolve fills in values. Each comes from the first source that has it, else from its default.
// The sources, in order: its flag, its environment variable, the file its NAME_FILE variable
// names, the config file (--config). An empty environment variable counts as unset. NAME_FILE
// keeps secrets out of the environment and process listings.
func (s *settings) resolve() error {
	for _, st := range s.list {
		if st.flag == "config" {
			if err := s.resolveOne(st); err != nil {
				return err
			}
			if st.value != "" {
				f, err := loadConfigFile(st.value)
				if err != nil {
					return configError{err.Error()}
				}
				s.file = f
			}
		}
	}
	for _, st := range s.list {
		if st.flag != "config" {
			if err := s.resolveOne(st); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *settings) resolveOne(st *setting) error {
	if st.set {
		return nil
	}
	if st.env != "" {
		if v := os.Getenv(st.env); v != "" {
			st.value = v
			return nil
		}
		if path, ok := os.LookupEnv(st.env + "_FILE"); ok {
			data, err := os.ReadFile(path)
			if err != nil {
				return configError{fmt.Sprintf("%s_FILE: %v", st.env, err)}
			}
			st.value = strings.TrimRight(string(data), "\r\n")
			return nil
		}
	}
	if v, ok := s.file.value(st.flag); ok {
		st.value = v
		return nil
	}
	st.value = st.def
	return nil
}

func (f *configFile) value(name string) (string, bool) {
	if f == nil {
		return "", false
	}
	v, ok := f.values[name]
	return v, ok
}

// configError is a bad or missing setting: the command exits 2 with one line naming it.
type configError struct{ msg string }

func (e configError) Error() string { return e.msg }

func badSetting(st *setting, format string, args ...any) error {
	name := "--" + st.flag
	if st.env != "" {
		name += " (" + st.env + ")"
	}
	return configError{name + ": " + fmt.Sprintf(format, args...)}
}

// bind is the resolve step's second half. It decodes each setting into the field its row binds
// to, in the table's order. It reports the first bad value with its flag and environment
// variable. A required setting left empty is one, unless a setting its row names is on.
func (s *settings) bind(v *values) error {
	for _, st := range s.list {
		if st.value == "" && st.required && !s.anyOn(st.unless) {
			if st.need != "" {
				return badSetting(st, "required: %s", st.need)
			}
			return badSetting(st, "required")
		}
		if st.value == "" && st.def == "" || st.with != "" && s.get(st.with).value == "" ||
			st.idle != nil && st.idle(s) {
			continue
		}
		if err := decode(st.bind(v), st.value); err != nil {
			return badSetting(st, "%v", err)
		}
	}
	return nil
}

// anyOn reports whether one of the named settings of this command is on. A switch is on when
// not false, any other setting when not empty. A bad switch counts as on: its own row reports it.
func (s *settings) anyOn(names []string) bool {
	for _, name := range names {
		st := s.find(name)
		switch {
		case st == nil:
		case st.isBool:
			if on, err := strconv.ParseBool(st.value); err != nil || on {
				return true
			}
		case st.value != "":
			return true
		}
	}
	return false
}
