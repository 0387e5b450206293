// Command pagelog appends to, reads, dumps and verifies a pagelog log
// directory, and runs the demo of `make run`.
//
// Each subcommand lives in its own file as a function
//
//	func runX(args []string, stdin io.Reader, stdout, stderr io.Writer) int
//
// that returns the exit status: 0 success, 1 failure, 2 wrong arguments.
// Tests call these functions directly.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands is filled in init: the help command refers to it.
var commands []command

func init() {
	commands = []command{
		{"append", "append stdin lines as records and print their offsets", runAppend},
		{"read", "write one record's body to stdout", runRead},
		{"dump", "list every record with its place on disk", runDump},
		{"tail", "print records as they are appended (--follow), from an offset or a cursor", runTail},
		{"cursors", "list a log's cursors: position, lag", runCursors},
		{"verify", "check every record and index; exit 1 on damage", runVerify},
		{"recover", "cut a torn tail, rewrite damaged indexes; --truncate-at-damage cuts damage", runRecover},
		{"queue", "a work queue in a directory: send, receive, delete, stats, dead, redrive", runQueue},
		{"stats", "show a log's or queue's figures beside its owner; --watch, --json", runStats},
		{"serve", "serve a log's or queue's figures as Prometheus metrics on /metrics", runServe},
		{"demo", "append, read back, reopen and verify a large log, run a queue through a crash; print figures", runDemo},
		{"bench", "measure pagelog's figures and the machine's limits on a disk (--dir)", runBench},
		{"help", "show this text, or a subcommand's usage", runHelp},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches to the subcommand named by args[0].
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return dispatch("pagelog", commands, usage, args, stdin, stdout, stderr)
}

// dispatch runs the command of cmds named by args[0], or prints usage: the
// top level and `pagelog queue` share it.
func dispatch(prog string, cmds []command, usage func(io.Writer), args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "%s: missing subcommand\n", prog)
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, c := range cmds {
		if c.name == args[0] {
			return c.run(args[1:], stdin, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "%s: unknown subcommand %q\n", prog, args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: pagelog <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-7s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'pagelog help <command>' for a command's flags.\n")
}

func runHelp(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] && c.name != "help" {
			return c.run([]string{"--help"}, nil, stdout, stdout)
		}
	}
	fmt.Fprintf(stderr, "pagelog help: unknown subcommand %q\n", args[0])
	usage(stderr)
	return 2
}

// newFlags returns a FlagSet for a subcommand that prints errors and its
// usage text to stderr.
func newFlags(name, synopsis, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("pagelog "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: pagelog %s %s\n\n%s\n\nFlags:\n", name, synopsis, about)
		printFlags(fs)
	}
	return fs
}

// printFlags is flag.PrintDefaults spelling flags the way this command
// documents them: --name.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(fs.Output(), "%-24s %s\n", line, text)
	})
}

// parseFlags parses args and reports the exit status to return when the
// command must stop: -1 to go on, 0 after --help, 2 on wrong arguments.
// Positional arguments are refused.
func parseFlags(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2 // the flag package printed the error and the usage
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	return -1
}

// usageError prints a one-line error and the usage text; it returns 2.
func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return 2
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// requireDir checks that --dir was given; it returns -1 when it was.
func requireDir(fs *flag.FlagSet, dir string) int {
	if dir == "" {
		return usageError(fs, "missing --dir")
	}
	return -1
}

// fail prints err as one line prefixed with the command's name; it returns 1.
// The engine's own "pagelog: " prefix is dropped, so that the line does not
// stutter.
func fail(stderr io.Writer, cmd string, err error) int {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	msg = strings.TrimPrefix(msg, "pagelog: ")
	fmt.Fprintf(stderr, "pagelog %s: %s\n", cmd, msg)
	return 1
}
