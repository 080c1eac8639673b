#!/usr/bin/env bash
# Passes `go test -v` output through and ends it with one line that counts the
# tests (subtests included), naming any that failed or were skipped, so a long
# log still ends with what matters.
awk '
  { print }
  /^ *--- PASS/ { pass++ }
  /^ *--- FAIL/ { fail++; failed = failed "\n  " $3 }
  /^ *--- SKIP/ { skip++; skipped = skipped "\n  " $3 }
  END {
    if (failed != "")  print "failed:" failed
    if (skipped != "") print "skipped:" skipped
    printf "tests: %d passed, %d failed, %d skipped\n", pass, fail, skip
  }'
