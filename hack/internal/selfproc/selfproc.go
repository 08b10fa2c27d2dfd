// Package selfproc runs the measurement tools' helpers (a fake goose, a
// proxy) as this same binary started again in another role, each in a
// process of its own: the child prints one JSON line that describes it and
// serves until its stdin closes.
package selfproc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// Proc is a running child.
type Proc struct {
	Cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
}

// Start starts this binary with args (the role first) and decodes the
// child's first line of output into info.
func Start(ctx context.Context, info any, args ...string) (*Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("failed to find this binary: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", args[0], err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", args[0], err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", args[0], err)
	}
	p := &Proc{Cmd: cmd, stdin: stdin, done: make(chan struct{})}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, info)
	}
	// Wait closes stdout: only after the first line was read.
	go func() { _ = cmd.Wait(); close(p.done) }()
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("failed to start %s: %w", args[0], err)
	}
	return p, nil
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop closes the child's stdin, which ends it, and waits for it to exit.
func (p *Proc) Stop() {
	_ = p.stdin.Close()
	<-p.done
}

// UntilStdinCloses blocks, in the child, until the parent closes its stdin
// or exits.
func UntilStdinCloses() { _, _ = io.Copy(io.Discard, os.Stdin) }
