package main

import "github.com/kmirror/kmirror/mirrorcli"

// `kmirror dump-state` decodes __mirror_state from the topic or from a log
// segment file; the logic lives in mirrorcli.
func init() {
	register(cliCommand("dump-state", "decode __mirror_state records (--bootstrap-server HOST:PORT or --segment FILE.log)",
		mirrorcli.DumpState))
}
