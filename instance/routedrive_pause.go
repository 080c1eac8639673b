//go:build kmirror_testhooks

package instance

import (
	"os"
	"strconv"
	"strings"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// A binary built with -tags kmirror_testhooks (e2e's TestRouteSwitchDriverKilledAtEachStep,
// never a release: `make build` has no tags) pauses a route switch's first driver in the
// step named by KMIRROR_TEST_PAUSE_SWITCH ("route:STEP,route:STEP", or "route:STEP:N" for
// the route's N-th switch, a switch back when N is 2), after it wrote the
// step's record and started the step's actions (and answered the request that started the
// switch), and logs that it did; the test then kills
// the process with SIGKILL, so that an instance dies in the middle of each step at a
// moment the test knows. Only the named attempt's first driver pauses: the one that takes
// over (driver term 2) must complete or roll back the switch, and the test's next attempt
// after a rollback must run through.
func init() {
	type pause struct {
		step    string
		attempt int32
	}
	pauses := map[string]pause{}
	for _, p := range strings.Split(os.Getenv("KMIRROR_TEST_PAUSE_SWITCH"), ",") {
		fields := strings.Split(strings.TrimSpace(p), ":")
		if len(fields) < 2 {
			continue
		}
		at := pause{step: fields[1], attempt: 1}
		if len(fields) == 3 {
			n, err := strconv.ParseInt(fields[2], 10, 32)
			if err != nil {
				panic("KMIRROR_TEST_PAUSE_SWITCH: " + p + ": " + err.Error())
			}
			at.attempt = int32(n)
		}
		pauses[fields[0]] = at
	}
	if len(pauses) == 0 {
		return
	}
	pauseAt = func(route string, rec *statetopic.RouteSwitch) bool {
		at, ok := pauses[route]
		return ok && at.step == rec.Step.String() && rec.Attempt == at.attempt && rec.DriverTerm == 1
	}
}
