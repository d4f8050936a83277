package testenv

// Internals for the black-box tests.
var (
	Descendants      = descendants
	PidAlive         = pidAlive
	ParseListFile    = parseListFile
	ParseSourcesFile = parseSourcesFile
)
