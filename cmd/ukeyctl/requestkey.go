package main

// The request-key upcall helper: what the daemon runs (as the kernel runs
// /sbin/request-key) to construct a key that request_key could not find.
// It follows keyutils 1.6.3's request-key(8) and request-key.conf(5):
//
//	ukeyctl request-key [-d] [-D <desc>] [-l] [-n] [-v] \
//	    <op> <key> <uid> <gid> <threadring> <processring> <sessionring> [<info>]
//
// It presents the helper token the daemon put in its environment (the
// client package does that), assumes the authority to construct the key,
// describes it, reads the callout information and picks the best line of
// the configuration: /etc/request-key.d/*.conf, then /etc/request-key.conf
// ($UKEYS_REQUEST_KEY_CONF names another file, whose drop-in directory is
// the same name with ".d" for ".conf"). A line is
//
//	<op> <type> <description> <callout-info> <program> <args...>
//
// where each of the first four fields may hold one '*'. The best line has
// the fewest characters matched by wildcards, compared column by column
// from the left; the first one read wins a tie. Arguments may use the
// macros %o %k %t %d %c %u %g %T %P %S (operation, key, type,
// description, callout info, uid, gid, thread, process and session
// keyrings), %{type:description} (the printable payload of a key found
// in the requestor's keyrings) and %% for a literal '%'. The program is
// executed with the helper's environment, so that it can run
// `ukeyctl instantiate`, `negate` or `reject` with the authority; if the
// program starts with '|', the callout information is piped to it and
// its output instantiates the key. If that program fails, the best line
// for the operation "negate" is run instead; if no line matches at all,
// the key is negated (for keyctl.NegativeTimeout) and the helper fails.
//
// One difference from keyutils: its matcher compares the text before a
// mid-pattern '*' with the end of the datum (so "abc*def" never matches
// "abcXdef"); here the text after the '*' is compared, as the manual
// describes.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/ukeys/ukeys/keyctl"
)

// reqParams is request-key's parameters.
type reqParams struct {
	keyID                             keyctl.Serial
	op, keyType, keyDesc, calloutInfo string
	key, uid, gid                     string
	thread, process, session          string
}

// reqKey is one run of the helper.
type reqKey struct {
	a         *app
	verbosity int
	localDirs bool
	noLog     bool
	debugMode bool
	noRecurse bool

	// The best line so far.
	cmd         string
	cmdWildness [4]uint
	cmdFile     string
	cmdLine     int
	found       bool

	confFile string // file being read, for messages
	confLine int
}

// requestKeyMain is the helper run as a program named request-key.
func (a *app) requestKeyMain(argv []string) {
	a.cmdRequestKey(argv)
	a.exit(0)
}

func (a *app) cmdRequestKey(args []string) {
	if len(args) == 2 && args[1] == "--version" {
		a.printf("request-key from ukeys %s (%s compatible)\n", version, keyutilsVersion)
		a.exit(0)
	}
	r := &reqKey{a: a}
	testDesc := "user;0;0;1f0000;debug:1234"
	opts, rest, _ := a.getopt(args, "D:dlnv")
	for _, o := range opts {
		switch o.c {
		case 'D':
			testDesc = o.arg
		case 'd':
			r.debugMode = true
		case 'l':
			r.localDirs = true
		case 'n':
			r.noLog = true
		case 'v':
			r.verbosity++
		}
	}
	if len(rest) != 7 && len(rest) != 8 {
		r.error("Unexpected argument count: %d\n", len(rest))
	}
	p := &reqParams{op: rest[0], key: rest[1], uid: rest[2], gid: rest[3],
		thread: rest[4], process: rest[5], session: rest[6]}
	haveInfo := len(rest) == 8
	if haveInfo {
		p.calloutInfo = rest[7]
	}
	p.keyID = keyctl.Serial(atoi(p.key))

	if !r.debugMode {
		if _, err := a.c().AssumeAuthority(p.keyID); err != nil && !haveInfo && errnoOf(err) != keyctl.EOPNOTSUPP {
			r.error("Failed to assume authority over key %d (%s)\n", p.keyID, strerror(err))
		}
	}
	var raw string
	if !r.debugMode {
		d, err := a.c().Describe(p.keyID)
		if err != nil {
			r.error("Key %d is inaccessible (%s)\n", p.keyID, strerror(err))
		}
		raw = d
	} else {
		raw = testDesc
	}
	r.debug("Key descriptor: \"%s\"\n", raw)
	d, ok := parseDescription(raw)
	if !ok {
		r.error("Failed to parse key description\n")
	}
	p.keyType, p.keyDesc = d.typ, d.desc
	r.debug("Key type: %s\n", p.keyType)
	r.debug("Key desc: %s\n", p.keyDesc)
	if !haveInfo {
		info, err := a.c().Read(keyctl.ReqKeyAuthKey)
		if err != nil {
			r.error("Failed to retrieve callout info (%s)\n", strerror(err))
		}
		p.calloutInfo = cString(info)
	}
	r.debug("CALLOUT: '%s'\n", p.calloutInfo)
	r.lookupAction(p)
}

// log writes a message to stderr when verbose and to syslog unless -n.
func (r *reqKey) log(prio syslogPriority, toStderr bool, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if toStderr {
		r.a.eprintf("%s", msg)
	}
	if !r.noLog {
		syslogSend(logAuthpriv|prio, "request-key", msg)
	}
}

func (r *reqKey) debug(format string, v ...any) {
	if r.verbosity > 0 {
		r.log(logDebug, true, format, v...)
	}
}

func (r *reqKey) error(format string, v ...any) {
	r.log(logErr, r.verbosity > 0, format, v...)
	r.a.exit(1)
}

func (r *reqKey) lineError(format string, v ...any) {
	r.error("%s:%d: "+format, append([]any{r.cmdFile, r.cmdLine}, v...)...)
}

// confPaths returns the drop-in directory and the main file.
func (r *reqKey) confPaths() (dir, file string) {
	if r.localDirs {
		return "request-key.d", "request-key.conf"
	}
	if f := os.Getenv("UKEYS_REQUEST_KEY_CONF"); f != "" {
		return strings.TrimSuffix(f, ".conf") + ".d", f
	}
	return "/etc/request-key.d", "/etc/request-key.conf"
}

// lookupAction finds the best line for p and runs it; with none, it
// negates the key and fails.
func (r *reqKey) lookupAction(p *reqParams) {
	dir, file := r.confPaths()
	r.found = false
	r.cmdWildness = [4]uint{^uint(0), ^uint(0), ^uint(0), ^uint(0)}
	r.scanConfDir(p, dir)
	r.scanConfFile(p, file)
	if r.found {
		r.executeProgram(p, r.cmd)
	}
	if !r.debugMode {
		// What the kernel does when the helper gives up, done here so the
		// requestor gets its answer without waiting for the helper's exit.
		r.a.c().Negate(p.keyID, uint32(keyctl.NegativeTimeout.Seconds()), 0)
	}
	r.error("%s: No matching action\n", file)
}

func (r *reqKey) scanConfDir(p *reqParams, dir string) {
	r.debug("__ SCAN %s __\n", dir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		r.error("Cannot open %s: %s\n", dir, strerror(err))
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !e.Type().IsRegular() && e.Type()&os.ModeType != 0 {
			continue
		}
		if len(name) < 5 || !strings.HasSuffix(name, ".conf") {
			continue
		}
		r.scanConfFile(p, filepath.Join(dir, name))
	}
}

// scanConfFile reads one configuration file, remembering the best line.
func (r *reqKey) scanConfFile(p *reqParams, file string) {
	r.debug("__ read %s __\n", file)
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		r.error("Cannot open %s: %s\n", file, strerror(err))
	}
	r.confFile = file
	lines := strings.SplitAfter(string(data), "\n")
	for i, line := range lines {
		if line == "" {
			continue
		}
		r.confLine = i + 1
		if len(line) >= 4096 {
			r.error("%s:%d: Line too long\n", file, r.confLine)
		}
		if line == "\n" || line[0] == '#' || cIsSpace(line[0]) {
			continue
		}
		line = strings.TrimSuffix(line, "\n")
		var wild [4]uint
		rest := line
		data := []string{p.op, p.keyType, p.keyDesc, p.calloutInfo}
		matched := true
		for col := range 4 {
			for rest != "" && cIsSpace(rest[0]) {
				rest = rest[1:]
			}
			i := 0
			for i < len(rest) && !cIsSpace(rest[i]) {
				i++
			}
			if rest == "" || i == len(rest) {
				r.error("%s:%d: Syntax error\n", file, r.confLine)
			}
			if !match(rest[:i], data[col], &wild[col]) {
				matched = false
				break
			}
			rest = rest[i+1:]
		}
		if !matched {
			continue
		}
		for rest != "" && cIsSpace(rest[0]) {
			rest = rest[1:]
		}
		if rest == "" {
			r.error("%s:%d: Syntax error\n", file, r.confLine)
		}
		r.debug("%s:%d: Line matches '%s' (%d,%d,%d,%d)\n", file, r.confLine, rest, wild[0], wild[1], wild[2], wild[3])
		if slices.Compare(wild[:], r.cmdWildness[:]) < 0 {
			r.cmdWildness = wild
			r.cmd = rest
			r.cmdFile = file
			r.cmdLine = r.confLine
			r.found = true
			r.debug("%s:%d: Prefer command (%d,%d,%d,%d)\n", file, r.confLine, wild[0], wild[1], wild[2], wild[3])
		}
	}
}

// match matches datum against a pattern with at most one '*' (the first
// counts), adding the number of characters the '*' stood for to *wild.
func match(pattern, datum string, wild *uint) bool {
	star := strings.IndexByte(pattern, '*')
	if star < 0 {
		return pattern == datum
	}
	if len(datum) < len(pattern)-1 {
		return false
	}
	head, tail := pattern[:star], pattern[star+1:]
	if !strings.HasPrefix(datum, head) || !strings.HasSuffix(datum, tail) {
		return false
	}
	*wild += uint(len(datum) - (len(pattern) - 1))
	return true
}

// executeProgram runs the chosen line's program.
func (r *reqKey) executeProgram(p *reqParams, cmdline string) {
	r.debug("execute_program('%s','%s')\n", p.calloutInfo, cmdline)
	pipeIt := strings.HasPrefix(cmdline, "|")
	if pipeIt {
		cmdline = cmdline[1:]
	}
	i := 0
	for i < len(cmdline) && !cIsSpace(cmdline[i]) {
		i++
	}
	prog := cmdline[:i]
	rest := cmdline[i:]
	argv := []string{filepath.Base(prog)}
	for {
		for rest != "" && cIsSpace(rest[0]) {
			rest = rest[1:]
		}
		if rest == "" {
			break
		}
		if len(argv) >= 254 {
			r.lineError("Too many arguments\n")
		}
		j := 0
		for j < len(rest) && !cIsSpace(rest[j]) {
			j++
		}
		arg := rest[:j]
		rest = rest[j:]
		r.debug("argv[%d]: '%s'\n", len(argv), arg)
		argv = append(argv, r.expand(p, arg))
	}
	if r.verbosity > 0 {
		verb := "Run"
		if pipeIt {
			verb = "PipeThru"
		}
		r.debug("%s %s\n", verb, prog)
		for k, v := range argv {
			r.debug("- argv[%d] = \"%s\"\n", k, v)
		}
	}
	if r.debugMode {
		r.a.printf("-- exec disabled --\n")
		r.a.exit(0)
	}
	if pipeIt {
		r.pipeToProgram(p, prog, argv)
	}
	r.a.out.Flush()
	err := syscall.Exec(prog, argv, os.Environ())
	r.lineError("Failed to execute '%s': %s\n", prog, strerror(err))
}

// expand replaces an argument that is a macro.
func (r *reqKey) expand(p *reqParams, arg string) string {
	if !strings.HasPrefix(arg, "%") {
		return arg
	}
	q := arg[1:]
	if q == "" {
		r.lineError("Missing macro name\n")
	}
	if q[0] == '%' {
		return arg[1:]
	}
	if len(q) == 1 {
		switch q[0] {
		case 'o':
			return p.op
		case 'k':
			return p.key
		case 't':
			return p.keyType
		case 'd':
			return p.keyDesc
		case 'c':
			return p.calloutInfo
		case 'u':
			return p.uid
		case 'g':
			return p.gid
		case 'T':
			return p.thread
		case 'P':
			return p.process
		case 'S':
			return p.session
		}
		r.lineError("Unsupported macro\n")
	}
	if q[0] != '{' {
		// keyutils lets multi-character words that are not keysubs
		// through unchanged.
		return arg
	}
	q = q[1:]
	typ, desc, ok := strings.Cut(q, ":")
	if !ok {
		r.lineError("Keysub macro lacks ':'\n")
	}
	end := strings.IndexByte(desc, '}')
	if end < 0 {
		r.lineError("Unterminated keysub macro\n")
	}
	if end+1 != len(desc) {
		r.lineError("Keysub macro has trailing rubbish\n")
	}
	desc = desc[:end]
	r.debug("Keysub: %s key \"%s\"\n", typ, desc)
	if typ == "" {
		r.lineError("Keysub type empty\n")
	}
	if desc == "" {
		r.lineError("Keysub description empty\n")
	}
	id, err := r.a.c().RequestKey(typ, desc, nil, 0)
	if err != nil {
		r.lineError("Keysub key not found: %s\n", strerror(err))
	}
	data, err := r.a.c().Read(id)
	if err != nil {
		r.lineError("Can't read keysub %d data: %s\n", id, strerror(err))
	}
	for _, c := range data {
		if !cIsPrint(c) {
			r.error("keysub %d data not printable ('%02x')\n", id, c)
		}
	}
	return cString(data)
}

// payloadMax is how much a piped program may write.
const payloadMax = 32768

// limitWriter keeps at most max bytes and notes an overrun.
type limitWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (w *limitWriter) Write(b []byte) (int, error) {
	if w.buf.Len()+len(b) >= w.max {
		w.over = true
		return 0, io.ErrShortWrite
	}
	return w.buf.Write(b)
}

// childLog logs what a piped program writes on its stderr, line by line.
type childLog struct {
	r   *reqKey
	buf []byte
}

func (w *childLog) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.r.log(logErr, w.r.verbosity > 0, "Child: %s", w.buf[:i+1])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= 512 {
		w.r.log(logErr, w.r.verbosity > 0, "Child: %s", w.buf)
		w.buf = w.buf[:0]
	}
	return len(b), nil
}

// pipeToProgram runs prog with the callout information on its stdin and
// instantiates the key with what it writes to stdout; if it fails, the
// "negate" action is looked up and run instead (once).
func (r *reqKey) pipeToProgram(p *reqParams, prog string, argv []string) {
	r.debug("pipe_to_program(%s -> %s)", p.calloutInfo, prog)
	out := &limitWriter{max: payloadMax + 1}
	cmd := &exec.Cmd{Path: prog, Args: argv, Env: os.Environ(),
		Stdin: strings.NewReader(p.calloutInfo), Stdout: out, Stderr: &childLog{r: r}}
	err := cmd.Run()
	if out.over {
		r.error("Too much data read from query program\n")
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if r.noRecurse {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.error("child died on signal %d\n", int(ws.Signal()))
			}
			r.error("child exited %d\n", ee.ExitCode())
		}
		r.noRecurse = true
		r.debug("child exited %d\n", ee.ExitCode())
		p.op = "negate"
		r.lookupAction(p)
	case err != nil:
		r.lineError("Failed to execute '%s': %s\n", prog, strerror(err))
	}
	payload := out.buf.Bytes()
	r.debug("instantiate with %d bytes\n", len(payload))
	if err := r.a.c().Instantiate(p.keyID, payload, 0); err != nil {
		clear(payload)
		r.error("instantiate key failed: %s\n", strerror(err))
	}
	clear(payload)
	r.debug("instantiation successful\n")
	r.a.exit(0)
}
