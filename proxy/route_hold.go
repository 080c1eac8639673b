package proxy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/enforcement"
)

// The fetch hold after a switch (docs/cutover.md, "What clients notice"). A classic consumer
// group's membership does not cross clusters: after the switch a member keeps fetching on the
// standby with the positions it had, while the standby refuses its commits (it never saw the
// member); once the member notices (its next heartbeat, within 3 s by default) it rejoins and
// resumes from the committed offsets copied at the switch, so it reads again whatever it read
// in between. The hold closes that window: Fetch of the switched topics is answered with a
// retriable error until every group that had members on the primary is Stable on the standby
// with as many members, or a bound passes. Members then read nothing before their rejoin, and
// after it they start exactly at the copied offsets.
//
// After a forced switch the positions a member had on the primary may lie past what the
// standby holds: the records written after the switch get the offsets the primary had given
// the lost ones, so a member that went on from its positions would skip them. Every client
// drops its positions when the coordinator tells its heartbeat that it is not a member
// (Java, librdkafka and franz-go take the partitions for lost), and a rejoined member fetches
// the committed offsets, which the group sync clamped to what was copied. But franz-go's
// classic consumer, told so by a commit instead, rejoins keeping its partitions and positions
// (its cooperative rejoin; found by TestRealForcedRouteSwitchPrimaryKilled, which read on
// from the primary's positions and skipped the records after the switch). So a forced
// switch's hold also answers a held group's commits of the held topics with
// COORDINATOR_LOAD_IN_PROGRESS, retried by every client, until the standby has answered the
// member's heartbeat that it is not a member (the route reads that answer), or the group
// rejoined: the heartbeat is what tells a member it left. Not until the rejoin alone: a
// franz-go member rejoins only once its commit in flight is done, so that would hold it
// until the hold's bound (measured: 48 s).
//
// A Fetch naming a held topic is answered whole (the proxy does not split and merge a Fetch):
// every partition gets NOT_LEADER_OR_FOLLOWER, which every client answers by refreshing its
// metadata and fetching again, keeping its positions. An incremental fetch (a fetch session's
// later request names only what changed) is answered FETCH_SESSION_ID_NOT_FOUND, so the client
// sends a full one. The answer waits up to the request's MaxWait (as a broker's long poll
// would), so held clients ask about twice a second, not in a tight loop.

// FetchHold is what SwitchRoute holds after the switch; the zero value holds nothing.
type FetchHold struct {
	// Topics are the switched topics.
	Topics map[string]bool
	// Groups are the consumer groups that had members on the primary at the switch, with their
	// member counts there: the hold ends when each is Stable on the standby with at least as
	// many members.
	Groups map[string]int
	// Max bounds the hold (DefaultFetchHoldMax if 0): a member that never comes back (its
	// process died with the switch) must not hold the others.
	Max time.Duration
	// Commits: also answer the groups' OffsetCommit and TxnOffsetCommit of the topics with
	// COORDINATOR_LOAD_IN_PROGRESS until each group rejoined (a forced switch: see above).
	Commits bool
}

// DefaultFetchHoldMax is past the Java consumer's default session timeout (45 s): a member
// that has not rejoined by then is gone and the group rebalances without it anyway.
const DefaultFetchHoldMax = 60 * time.Second

// fetchHoldPoll is how often the hold asks the standby about the groups.
const fetchHoldPoll = 200 * time.Millisecond

// fetchHold is an installed hold.
type fetchHold struct {
	topics map[string]bool
	// commitsHeld are the groups whose commits are held (Commits), until they rejoin.
	commitsHeld atomic.Pointer[map[string]bool]
	// told are the members (group, member id) the standby's heartbeat answer told that they
	// are not members: their commits pass.
	told     sync.Map
	until    time.Time
	released chan struct{}
	once     sync.Once
}

func (h *fetchHold) release() { h.once.Do(func() { close(h.released) }) }

// active reports whether h still holds.
func (h *fetchHold) active(now time.Time) bool {
	if h == nil || !now.Before(h.until) {
		return false
	}
	select {
	case <-h.released:
		return false
	default:
		return true
	}
}

// installFetchHold installs hold on route r and starts what lifts it; nothing when hold has no
// topics or no groups (nobody to protect).
func (r *Proxy) installFetchHold(hold FetchHold) {
	if len(hold.Topics) == 0 || len(hold.Groups) == 0 {
		return
	}
	max := hold.Max
	if max <= 0 {
		max = DefaultFetchHoldMax
	}
	h := &fetchHold{topics: hold.Topics, until: time.Now().Add(max), released: make(chan struct{})}
	groups := maps.Clone(hold.Groups)
	if hold.Commits {
		h.holdCommits(groups)
	}
	r.appRoute.hold.Store(h)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer h.release()
		began := time.Now()
		waiting, err := r.awaitGroupsRejoined(h, groups)
		switch {
		case len(waiting) == 0:
			r.log.Info("fetch hold lifted: every consumer group rejoined on the cluster switched to", "groups", len(groups), "after", time.Since(began).Round(time.Millisecond))
		case r.ctx.Err() != nil:
		default:
			r.log.Warn("fetch hold lifted by its bound: some consumer groups have not rejoined on the cluster switched to; their members read from where they are",
				"after", time.Since(began).Round(time.Millisecond), "groups_waiting", strings.Join(waiting, ", "), "last_error", err)
		}
	}()
}

// awaitGroupsRejoined polls the standby until every group is Stable with its member count, the
// hold's bound passes, or the route stops; it returns the groups still waited for and the last
// error reading them.
func (r *Proxy) awaitGroupsRejoined(h *fetchHold, groups map[string]int) ([]string, error) {
	opts, err := r.UpstreamClientOptions()
	if err != nil {
		return slices.Sorted(maps.Keys(groups)), err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return slices.Sorted(maps.Keys(groups)), fmt.Errorf("creating the fetch hold's client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithDeadline(r.ctx, h.until)
	defer cancel()
	t := time.NewTicker(fetchHoldPoll)
	defer t.Stop()
	var lastErr error
	for {
		names := slices.Sorted(maps.Keys(groups))
		described, err := adm.DescribeGroups(ctx, names...)
		if err != nil && len(described) == 0 {
			lastErr = err
		}
		rejoined := 0
		for _, d := range described {
			if d.Err == nil && d.State == "Stable" && len(d.Members) >= groups[d.Group] {
				delete(groups, d.Group)
				rejoined++
			}
		}
		if rejoined > 0 && h.commitsHeld.Load() != nil {
			h.holdCommits(groups)
		}
		if len(groups) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return slices.Sorted(maps.Keys(groups)), lastErr
		case <-h.released:
			return nil, nil
		case <-t.C:
		}
	}
}

// holdFetch answers a route's Fetch while the fetch hold lasts (nil: forward it).
func (s *session) holdFetch(h requestHeader, frame []byte) (chan []byte, error) {
	hold := s.p.appRoute.hold.Load()
	if !hold.active(time.Now()) {
		return nil, nil
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version = h.version
	if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil {
		return nil, fmt.Errorf("route %s: decoding Fetch v%d: %w", s.p.appRoute.name, h.version, err)
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.Version = h.version
	switch {
	case req.SessionEpoch > 0:
		// Incremental: it may name nothing, and its session may hold a held topic.
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
	case !namesHeldTopic(req, hold.topics):
		return nil, nil
	default:
		for _, t := range req.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.NotLeaderForPartition.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	s.p.metrics.refusal(h.key, refusedRouteFetchHold)
	answer := appendResponseFrame(nil, h.corrID, responseHeaderVersion(h.key, h.version), resp.AppendTo(nil))
	ch := make(chan []byte, 1)
	wait := time.Duration(req.MaxWaitMillis) * time.Millisecond
	if rest := time.Until(hold.until); rest < wait {
		wait = rest
	}
	if wait <= 0 {
		ch <- answer
		return ch, nil
	}
	// A long poll: answered after MaxWait, or at once when the hold lifts or the client goes.
	go func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-hold.released:
		case <-s.ctx.Done():
		}
		ch <- answer
	}()
	return ch, nil
}

// holdCommits holds the commits of groups from now on (the poller's map is its own).
func (h *fetchHold) holdCommits(groups map[string]int) {
	held := make(map[string]bool, len(groups))
	for g := range groups {
		held[g] = true
	}
	h.commitsHeld.Store(&held)
}

// holdCommit answers a route's OffsetCommit or TxnOffsetCommit of a group whose commits the
// hold holds (nil: forward it).
func (s *session) holdCommit(h requestHeader, frame []byte) (chan []byte, error) {
	hold := s.p.appRoute.hold.Load()
	if !hold.active(time.Now()) {
		return nil, nil
	}
	held := hold.commitsHeld.Load()
	if held == nil || len(*held) == 0 {
		return nil, nil
	}
	resp, err := enforcement.RefuseCommit(h.key, h.version, frame[4+h.bodyOff:], hold.topics, func(g, member string) bool {
		if !(*held)[g] || member == "" { // no member: a commit outside group management
			return false
		}
		_, told := hold.told.Load(groupMember{g, member})
		return !told
	})
	if err != nil || resp == nil {
		return nil, err
	}
	s.p.metrics.refusal(h.key, refusedRouteCommitHold)
	ch := make(chan []byte, 1)
	ch <- appendResponseFrame(nil, h.corrID, responseHeaderVersion(h.key, h.version), resp.AppendTo(nil))
	return ch, nil
}

// keyHeartbeat is the API key whose answers a switched route watches.
const keyHeartbeat = 12

// groupMember names a member of a consumer group.
type groupMember struct{ group, member string }

// watchHeartbeat makes the response reader tell the hold when the standby answers a held
// group member's Heartbeat that it is not a member (holdCommit).
func (s *session) watchHeartbeat(h requestHeader, frame []byte, p *pending) {
	hold := s.p.appRoute.hold.Load()
	if !hold.active(time.Now()) {
		return
	}
	held := hold.commitsHeld.Load()
	if held == nil || len(*held) == 0 {
		return
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Version = h.version
	if err := req.ReadFrom(frame[4+h.bodyOff:]); err != nil || !(*held)[req.Group] {
		return // a malformed one is the broker's to refuse
	}
	who := groupMember{req.Group, req.MemberID}
	p.watch = func(resp []byte) {
		_, body, err := splitResponse(resp, responseHeaderVersion(h.key, h.version))
		r := kmsg.NewPtrHeartbeatResponse()
		r.Version = h.version
		if err != nil || r.ReadFrom(body) != nil {
			return
		}
		switch r.ErrorCode {
		case kerr.UnknownMemberID.Code, kerr.IllegalGeneration.Code, kerr.FencedInstanceID.Code:
			hold.told.Store(who, true)
		}
	}
}

func namesHeldTopic(req *kmsg.FetchRequest, held map[string]bool) bool {
	for _, t := range req.Topics {
		if held[t.Topic] {
			return true
		}
	}
	return false
}
