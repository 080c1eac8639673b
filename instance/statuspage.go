package instance

import (
	"context"
	"fmt"

	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/statuspage"
)

// pageSource feeds the status page (package statuspage) from the same
// sources as DescribeMirrors and the coordinators' group: what the page
// shows is what `kmirror mirrors --describe` prints, configs excluded.
type pageSource struct{ in *Instance }

// Status reads the mirrors as DescribeMirrors answers any caller, and the
// instances; a group that cannot be described leaves the mirrors shown.
func (s pageSource) Status(ctx context.Context) (statuspage.Status, error) {
	resp := s.in.Backend.DescribeMirrors(ctx, &protocol.DescribeMirrorsRequest{})
	if err := protocol.ResponseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return statuspage.Status{}, fmt.Errorf("describing mirrors: %w", err)
	}
	st := statuspage.Status{Mirrors: resp.Mirrors, Routes: resp.Routes}
	members, err := s.in.Coord.Members(ctx)
	if err != nil {
		st.InstancesError = err.Error()
	}
	st.Instances = members
	return st, nil
}

// newStatusPage builds the page and serves it at / on the metrics address.
func (in *Instance) newStatusPage() {
	in.page = statuspage.New(statuspage.Config{Source: pageSource{in}, Every: in.cfg.StatusPageEvery, Logger: in.log})
	in.Proxy.SetStatusPage(in.page.Handler())
}
