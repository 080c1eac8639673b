package apis

// Switching a route back to its primary (docs/cutover.md, "Switching
// back"). After a switch the applications write to the standby; once a
// mirror copies the standby back to the primary, the route can be switched
// back the same way, step for step, in the other direction. That mirror
// cannot live here: a kmirror's mirrors write to the cluster it fronts, and
// this one fronts the standby. It lives on the kmirror in front of the
// primary, which the route's mirror reads from (failback needs that too:
// 1001_failback.go asks the source's kmirror for its last mirrored offsets).
// So the driver here asks that kmirror, with the route's mirror's source
// connection and credentials, which mirror copies the standby's topics
// (ListMirrors), and has it fail that mirror over (RemoveTopicsFromMirror,
// then DescribeMirrors until every partition is STOPPED). Everything else
// reads and writes the two clusters as a switch to the standby does, with
// their roles exchanged (SwitchActions.from and .to).

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kmirror/kmirror/coordinator/datapath"
	"github.com/kmirror/kmirror/protocol"
)

// FindBack names the mirror on the primary's kmirror (the route's mirror's source) whose
// source is this kmirror's destination (the standby) and which mirrors every one of topics:
// the mirror a switch back drains and fails over. It says what to do when there is none, or
// more than one.
func (a SwitchActions) FindBack(ctx context.Context, mirror string, topics []string) (string, error) {
	if len(topics) == 0 {
		return "", datapath.Permanent(fmt.Errorf("mirror %s has no topics in this instance's view: nothing to switch back", mirror))
	}
	standby, err := a.B.destinationClusterID(ctx)
	if err != nil {
		return "", err
	}
	cl, err := a.primaryKmirror(ctx, mirror)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	req := protocol.NewPtrListMirrorsRequest()
	req.IncludeTopicNames = true
	kresp, err := cl.Request(ctx, req)
	if err != nil {
		return "", fmt.Errorf("asking the primary's kmirror (mirror %s's source) for its mirrors: %w; "+
			"a switch back needs mirror %s to read from the kmirror in front of the primary, which runs the mirror back from the standby", mirror, err, mirror)
	}
	resp := kresp.(*protocol.ListMirrorsResponse)
	if err := protocol.ResponseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return "", fmt.Errorf("the primary's kmirror lists no mirrors: %w", err)
	}
	var found []string
	for _, rm := range resp.Mirrors {
		if rm.SourceClusterID != standby {
			continue
		}
		all := true
		for _, t := range topics {
			all = all && slices.Contains(rm.TopicNames, t)
		}
		if all {
			found = append(found, rm.Name)
		}
	}
	switch len(found) {
	case 1:
		return found[0], a.mayFailOver(ctx, cl, found[0])
	case 0:
		return "", datapath.Permanent(fmt.Errorf("no mirror on the primary's kmirror copies %s from the standby (cluster %s): "+
			"create one there whose source is this kmirror, add the topics (a failback: it continues from mirror %s's last mirrored offsets), "+
			"and switch again once it has caught up", strings.Join(topics, ", "), standby, mirror))
	}
	return "", datapath.Permanent(fmt.Errorf("mirrors %s on the primary's kmirror all copy %s from the standby: a switch back fails over one; remove the others",
		strings.Join(found, ", "), strings.Join(topics, ", ")))
}

// primaryKmirror is a new client of the kmirror in front of the primary, reached with the
// route's mirror's source connection and credentials; the caller closes it. A new one per
// call, for its mirror RPCs (Backend.sourceKmirrorClient): a switch back asks it a few times.
func (a SwitchActions) primaryKmirror(ctx context.Context, mirror string) (*kgo.Client, error) {
	m, err := a.B.Mirror(ctx, mirror)
	if err != nil {
		return nil, err
	}
	return a.B.sourceKmirrorClient(m)
}

// mayFailOver checks, before a switch back starts, that the primary's kmirror lets the route's
// mirror's source principal fail the mirror back over (ALTER on CLUSTER there): the switch
// only goes forward from its failover, and a refusal found then would keep the route's writes
// frozen until someone granted it. A RemoveTopicsFromMirror that names no topic is
// authorised like any other and changes nothing.
func (a SwitchActions) mayFailOver(ctx context.Context, cl *kgo.Client, back string) error {
	req := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	req.MirrorName = back
	kresp, err := cl.Request(ctx, req)
	if err != nil {
		return fmt.Errorf("asking the primary's kmirror whether mirror %s may be failed over: %w", back, err)
	}
	resp := kresp.(*protocol.RemoveTopicsFromMirrorResponse)
	if err := protocol.ResponseError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return datapath.Permanent(fmt.Errorf("the primary's kmirror would not let this kmirror fail mirror %s over at the end of the switch back "+
			"(it asks with the source credentials of the route's mirror, which need ALTER on CLUSTER there): %w", back, err))
	}
	return nil
}

// failOverBack asks the primary's kmirror to fail the mirror back over for the topics
// (RemoveTopicsFromMirror) and reports whether every partition of them is STOPPED there.
func (a SwitchActions) failOverBack(ctx context.Context, mirror string, topics []string) (bool, error) {
	cl, err := a.primaryKmirror(ctx, mirror)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	described, err := a.describeBack(ctx, cl)
	if err != nil {
		return false, err
	}
	var stop []string
	for _, t := range topics {
		if !allStopped(described, t) {
			stop = append(stop, t)
		}
	}
	if len(stop) == 0 {
		return true, nil
	}
	req := protocol.NewPtrRemoveTopicsFromMirrorRequest()
	req.MirrorName = a.Back
	for _, t := range stop {
		req.Topics = append(req.Topics, protocol.TopicName{Name: t})
	}
	kresp, err := cl.Request(ctx, req)
	if err != nil {
		return false, fmt.Errorf("failing mirror %s over on the primary's kmirror: %w", a.Back, err)
	}
	resp := kresp.(*protocol.RemoveTopicsFromMirrorResponse)
	if err := backError(resp.ErrorCode, resp.ErrorMessage, "failing mirror %s over on the primary's kmirror", a.Back); err != nil {
		return false, err
	}
	for _, tr := range resp.Topics {
		if err := backError(tr.ErrorCode, tr.ErrorMessage, "failing %s of mirror %s over on the primary's kmirror", tr.Name, a.Back); err != nil {
			return false, err
		}
	}
	a.B.Log.Info("failover of the mirror back requested on the primary's kmirror by a route switch", "mirror", a.Back, "topics", stop)
	return false, nil
}

// describeBack describes the mirror back on the primary's kmirror.
func (a SwitchActions) describeBack(ctx context.Context, cl *kgo.Client) (*protocol.DescribeMirrorsResponseMirror, error) {
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{a.Back}
	kresp, err := cl.Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describing mirror %s on the primary's kmirror: %w", a.Back, err)
	}
	resp := kresp.(*protocol.DescribeMirrorsResponse)
	if err := backError(resp.ErrorCode, resp.ErrorMessage, "describing mirror %s on the primary's kmirror", a.Back); err != nil {
		return nil, err
	}
	for i := range resp.Mirrors {
		rm := &resp.Mirrors[i]
		if rm.Name != a.Back {
			continue
		}
		if err := backError(rm.ErrorCode, rm.ErrorMessage, "describing mirror %s on the primary's kmirror", a.Back); err != nil {
			return nil, err
		}
		return rm, nil
	}
	return nil, datapath.Permanent(fmt.Errorf("the primary's kmirror does not describe mirror %s", a.Back))
}

// allStopped reports whether every partition of topic is STOPPED in the described mirror.
func allStopped(m *protocol.DescribeMirrorsResponseMirror, topic string) bool {
	for _, t := range m.Topics {
		if t.Name != topic {
			continue
		}
		for _, p := range t.Partitions {
			if p.State != protocol.MirrorStateStopped.String() {
				return false
			}
		}
		return len(t.Partitions) > 0
	}
	return false
}

// backAtRisk is the mirror back's records at risk as the primary's kmirror describes them (a
// forced switch back, the standby gone).
func (a SwitchActions) backAtRisk(ctx context.Context, mirror string) (int64, error) {
	cl, err := a.primaryKmirror(ctx, mirror)
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	described, err := a.describeBack(ctx, cl)
	if err != nil {
		return -1, err
	}
	var total int64
	for _, t := range described.Topics {
		for _, p := range t.Partitions {
			if p.RecordsAtRisk < 0 {
				return -1, fmt.Errorf("mirror %s on the primary's kmirror: the records at risk of %s/%d are unknown", a.Back, t.Name, p.Partition)
			}
			total += p.RecordsAtRisk
		}
	}
	return total, nil
}

// backError is a primary's kmirror's error answer, permanent unless its code is retriable.
func backError(code int16, msg *string, format string, args ...any) error {
	err := protocol.ResponseError(code, msg)
	if err == nil {
		return nil
	}
	err = fmt.Errorf(format+": %w", append(args, err)...)
	if !protocol.ErrorForCode(code).Retriable {
		return datapath.Permanent(err)
	}
	return err
}
