#!/usr/bin/env bash
# Passes `go test -v` output through and ends it with one line that counts the
# tests (subtests included), naming any that failed or were skipped, so a long
# log still ends with what matters. As each package finishes it adds a progress
# line (time, packages done so far), since go test prints a package's output
# only when the package ends.
awk '
  { print }
  /^ok  \t/ || /^FAIL\t/ {
    "date +%T" | getline now; close("date +%T")
    pkgs++
    printf "== %s  packages done: %d (last: %s %s)\n", now, pkgs, $1, $2
  }
  /^ *--- PASS/ { pass++ }
  /^ *--- FAIL/ { fail++; failed = failed "\n  " $3 }
  /^ *--- SKIP/ { skip++; skipped = skipped "\n  " $3 }
  END {
    if (failed != "")  print "failed:" failed
    if (skipped != "") print "skipped:" skipped
    printf "tests: %d passed, %d failed, %d skipped\n", pass, fail, skip
  }'
