#!/usr/bin/env bash
# Passes `go test -v` output through and ends it with one line that counts the
# tests (subtests included), naming any that failed or were skipped, so a long
# log still ends with what matters. As each package finishes it adds a progress
# line (time, packages done so far), since go test prints a package's output
# only when the package ends.
#
# Under each failed test it repeats the first lines that test logged with a
# file:line (t.Errorf, t.Fatalf, t.Log), cut to 400 characters: a failing
# test's own message can sit thousands of lines above the end, under the logs
# its clean-up dumps, and a CI report that keeps only the log's ends lost it
# (TestRouteSwitchDriverKilledAtEachStep, 2026-12-07).
awk '
  { print }
  /^=== (RUN|CONT|NAME) / { cur = $3 }
  /^ +[A-Za-z0-9_.-]+\.go:[0-9]+: / && cur != "" {
    if (nmsg[cur] < 20) { nmsg[cur]++; msgs[cur] = msgs[cur] "\n      " substr($0, 1, 400) }
  }
  /^ok  \t/ || /^FAIL\t/ {
    "date +%T" | getline now; close("date +%T")
    pkgs++
    printf "== %s  packages done: %d (last: %s %s)\n", now, pkgs, $1, $2
  }
  /^ *--- PASS/ { pass++ }
  /^ *--- FAIL/ { fail++; failed = failed "\n  " $3 msgs[$3] }
  /^ *--- SKIP/ { skip++; skipped = skipped "\n  " $3 }
  END {
    if (failed != "")  print "failed:" failed
    if (skipped != "") print "skipped:" skipped
    printf "tests: %d passed, %d failed, %d skipped\n", pass, fail, skip
  }'
