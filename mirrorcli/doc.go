// Package mirrorcli is the logic of the operator commands that talk to a
// kmirror proxy or read its state: `kmirror mirrors` (create, add, remove,
// pause, resume, list, describe and delete mirrors through the mirror RPCs of
// docs/PROTOCOL.md, shaped after the Cluster Mirroring proposal's kafka-mirrors
// tool) and `kmirror dump-state` (decode __mirror_state from the topic or
// from a log segment file).
//
// The cmd/kmirror files only hand arguments and the standard streams to
// Mirrors and DumpState. Everything here writes results to stdout and
// problems to stderr, and returns an error when the exit status must be
// non-zero: a *UsageError for bad arguments (exit 2, the message names the
// problem and the fix), anything else for a failed request or a failed topic
// (exit 1).
package mirrorcli
