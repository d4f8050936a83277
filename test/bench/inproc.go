package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/walbox/walbox/internal/relayd"
	"github.com/walbox/walbox/publisher"
	"github.com/walbox/walbox/replication"
)

// runInProcess runs the relay as `walbox run` wires it (package relayd: the relay over publisher
// sessions, its metrics and slot poller, default settings, no HTTP endpoints) with a CPU
// profile, and writes the CPU and allocation profiles to spec.Profile + ".cpu.pprof" and
// ".allocs.pprof" when stopped. It exists to find where time goes; the benchmark's figures come
// from the real binary.
func runInProcess(ctx context.Context, spec childSpec) error {
	pcfg := publisher.Config{URL: spec.AMQPURL, Exchange: spec.Exchange, Window: spec.Window, AppID: "walbox"}
	eps, err := publisher.NewEndpoints(pcfg, []string{spec.AMQPURL})
	if err != nil {
		return err
	}
	d, err := relayd.New(relayd.Config{
		Relay:   replication.Config{DatabaseURL: spec.DatabaseURL, Slot: spec.Slot, Window: spec.Window},
		Brokers: eps,
	})
	if err != nil {
		return err
	}
	cpu, err := os.Create(spec.Profile + ".cpu.pprof")
	if err != nil {
		return fmt.Errorf("create profile: %w", err)
	}
	defer cpu.Close()
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return fmt.Errorf("start profile: %w", err)
	}
	runErr := d.Run(ctx)
	pprof.StopCPUProfile()
	return errors.Join(runErr, writeProfile("allocs", spec.Profile+".allocs.pprof"))
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create profile: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		return fmt.Errorf("write %s profile: %w", name, err)
	}
	return nil
}
