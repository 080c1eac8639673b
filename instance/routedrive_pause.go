//go:build kmirror_testhooks

package instance

import (
	"os"
	"strings"

	"github.com/kmirror/kmirror/coordinator/statetopic"
)

// A binary built with -tags kmirror_testhooks (e2e's TestRouteSwitchDriverKilledAtEachStep,
// never a release: `make build` has no tags) pauses a route switch's first driver in the
// step named by KMIRROR_TEST_PAUSE_SWITCH ("route:STEP,route:STEP"), after it wrote the
// step's record and started the step's actions (and answered the request that started the
// switch), and logs that it did; the test then kills
// the process with SIGKILL, so that an instance dies in the middle of each step at a
// moment the test knows. Only the first attempt's first driver pauses: the one that takes
// over (driver term 2) must complete or roll back the switch, and the test's second attempt
// after a rollback must run through.
func init() {
	pauses := map[string]string{}
	for _, p := range strings.Split(os.Getenv("KMIRROR_TEST_PAUSE_SWITCH"), ",") {
		if route, step, ok := strings.Cut(strings.TrimSpace(p), ":"); ok {
			pauses[route] = step
		}
	}
	if len(pauses) == 0 {
		return
	}
	pauseAt = func(route string, rec *statetopic.RouteSwitch) bool {
		return pauses[route] == rec.Step.String() && rec.Attempt == 1 && rec.DriverTerm == 1
	}
}
