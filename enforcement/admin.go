package enforcement

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Admin requests that change a mirror topic (keys 20 DeleteTopics,
// 21 DeleteRecords, 33 AlterConfigs, 37 CreatePartitions,
// 44 IncrementalAlterConfigs) are refused whole when they name a read-only
// mirror topic: admin tools send one request per command, and a refused
// request changes nothing, so no part of it is applied behind the caller's
// back. Other topics in the same request are answered with a message saying
// they were not applied and why.

// AdminKeys are the request keys CheckAdmin inspects.
var AdminKeys = map[int16]bool{20: true, 21: true, 33: true, 37: true, 44: true}

// CheckAdmin returns a complete response when the request must be refused,
// or nil to forward it.
func (g *Guard) CheckAdmin(ctx context.Context, key, version int16, body []byte) (kmsg.Response, error) {
	set := g.set.Load()
	if set.Empty() || !AdminKeys[key] {
		return nil, nil
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if err := req.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("enforcement: decode %s v%d: %w", kmsg.NameForKey(key), version, err)
	}
	a := adminCheck{g: g, code: g.opts.ErrorCode, kind: "read-only mirror topic",
		why: func(topic string) string { return set.refusal(topic, -1) },
		configWhy: func(resourceType int8, topic string, keys []string) string {
			return syncedKeyRefusal(set, resourceType, topic, keys)
		},
		growNote: " (the mirror grows the destination when the source grows)"}
	return a.check(ctx, req, version)
}

// check answers req when a topic it names is refused, else returns nil.
func (a *adminCheck) check(ctx context.Context, req kmsg.Request, version int16) (kmsg.Response, error) {
	var resp kmsg.Response
	var err error
	switch r := req.(type) {
	case *kmsg.CreateTopicsRequest:
		resp = a.createTopics(r)
	case *kmsg.DeleteTopicsRequest:
		resp, err = a.deleteTopics(ctx, r)
	case *kmsg.DeleteRecordsRequest:
		resp = a.deleteRecords(r)
	case *kmsg.CreatePartitionsRequest:
		resp = a.createPartitions(r)
	case *kmsg.IncrementalAlterConfigsRequest:
		resp = a.incrementalAlterConfigs(r)
	case *kmsg.AlterConfigsRequest:
		resp = a.alterConfigs(r)
	}
	if err != nil || resp == nil {
		return nil, err
	}
	resp.SetVersion(version)
	return resp, nil
}

// adminCheck answers admin requests that name a refused topic. The read-only
// guard and the internals guard (internals.go) differ only in why a topic
// is refused, with which code, and in the note on CreatePartitions.
type adminCheck struct {
	g         *Guard
	code      int16
	kind      string                                                      // what a refused topic is, for the others' messages
	why       func(topic string) string                                   // refusal of a change to the topic, "" to allow
	configWhy func(resourceType int8, topic string, keys []string) string // refusal of a config change
	growNote  string                                                      // appended to CreatePartitions refusals
	blocker   string                                                      // first refused topic, named in the others' messages
}

// mapSlice is f of every element of ts, in order: the names of a request's topics or
// resources, the answers to its partitions.
func mapSlice[T, U any](ts []T, f func(T) U) []U {
	out := make([]U, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}

// topicWhy is why the named topic may not be changed ("" if it may), as collect wants it.
func (a *adminCheck) topicWhy(_ int, name string) string { return a.why(name) }

// collect returns the refusal per topic (by index) or nil when none applies.
func (a *adminCheck) collect(names []string, why func(i int, name string) string) []string {
	reasons := make([]string, len(names))
	any := false
	for i, n := range names {
		if reasons[i] = why(i, n); reasons[i] != "" {
			any = true
			if a.blocker == "" {
				a.blocker = n
			}
		}
	}
	if !any {
		return nil
	}
	for i, n := range names {
		if reasons[i] == "" {
			reasons[i] = fmt.Sprintf("not applied to %q: the same request names %s %q; send it without that topic", n, a.kind, a.blocker)
		}
	}
	return reasons
}

func (a *adminCheck) deleteTopics(ctx context.Context, r *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	var names []string
	ids := make([][16]byte, 0)
	if len(r.Topics) > 0 {
		for _, t := range r.Topics {
			name := ""
			if t.Topic != nil {
				name = *t.Topic
			}
			n, err := a.g.topicName(ctx, name, t.TopicID)
			if err != nil {
				return nil, err
			}
			names, ids = append(names, n), append(ids, t.TopicID)
		}
	} else {
		for _, n := range r.TopicNames {
			names, ids = append(names, n), append(ids, [16]byte{})
		}
	}
	reasons := a.collect(names, a.topicWhy)
	if reasons == nil {
		return nil, nil
	}
	resp := kmsg.NewPtrDeleteTopicsResponse()
	for i, n := range names {
		t := kmsg.NewDeleteTopicsResponseTopic()
		t.Topic, t.TopicID, t.ErrorCode, t.ErrorMessage = kmsg.StringPtr(n), ids[i], a.code, kmsg.StringPtr(reasons[i])
		resp.Topics = append(resp.Topics, t)
	}
	return resp, nil
}

// topicRefusals names a request's topics and gives each its refusal (topicWhy, collect),
// or nil reasons when none is refused.
func topicRefusals[T any](a *adminCheck, topics []T, name func(T) string) (names, reasons []string) {
	names = mapSlice(topics, name)
	return names, a.collect(names, a.topicWhy)
}

// createTopics refuses creating a refused topic (only the internals guard
// refuses topics that may not exist yet: kmirror creates its state topic
// itself, with compaction).
func (a *adminCheck) createTopics(r *kmsg.CreateTopicsRequest) kmsg.Response {
	names, reasons := topicRefusals(a, r.Topics, func(t kmsg.CreateTopicsRequestTopic) string { return t.Topic })
	if reasons == nil {
		return nil
	}
	resp := kmsg.NewPtrCreateTopicsResponse()
	for i, n := range names {
		t := kmsg.NewCreateTopicsResponseTopic()
		t.Topic, t.ErrorCode, t.ErrorMessage = n, a.code, kmsg.StringPtr(reasons[i])
		t.NumPartitions, t.ReplicationFactor = -1, -1
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (a *adminCheck) deleteRecords(r *kmsg.DeleteRecordsRequest) kmsg.Response {
	_, reasons := topicRefusals(a, r.Topics, func(t kmsg.DeleteRecordsRequestTopic) string { return t.Topic })
	if reasons == nil {
		return nil
	}
	resp := kmsg.NewPtrDeleteRecordsResponse()
	for _, t := range r.Topics {
		rt := kmsg.NewDeleteRecordsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewDeleteRecordsResponseTopicPartition()
			rp.Partition, rp.LowWatermark, rp.ErrorCode = p.Partition, -1, a.code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (a *adminCheck) createPartitions(r *kmsg.CreatePartitionsRequest) kmsg.Response {
	names := mapSlice(r.Topics, func(t kmsg.CreatePartitionsRequestTopic) string { return t.Topic })
	reasons := a.collect(names, func(_ int, n string) string {
		if why := a.why(n); why != "" {
			return why + a.growNote
		}
		return ""
	})
	if reasons == nil {
		return nil
	}
	resp := kmsg.NewPtrCreatePartitionsResponse()
	for i, n := range names {
		t := kmsg.NewCreatePartitionsResponseTopic()
		t.Topic, t.ErrorCode, t.ErrorMessage = n, a.code, kmsg.StringPtr(reasons[i])
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

const topicResource = 2 // ConfigResourceType TOPIC

// syncedKeyRefusal refuses changes of configs the mirror copies from the
// source; keys in the mirror's topic.properties.exclude stay the
// destination's own.
func syncedKeyRefusal(set *ReadOnlySet, resourceType int8, topic string, keys []string) string {
	if resourceType != topicResource {
		return ""
	}
	why := set.refusal(topic, -1)
	if why == "" {
		return ""
	}
	if set.IsLoading() {
		return why // whether the topic is a mirror topic, and which keys are its own, is not known yet
	}
	local := set.topics[topic].localKeys
	for _, k := range keys {
		if !local[k] {
			return fmt.Sprintf("config %s is copied from the source: %s", k, why)
		}
	}
	return ""
}

func (a *adminCheck) incrementalAlterConfigs(r *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	refused := a.refusedResources(len(r.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return r.Resources[i].ResourceType, r.Resources[i].ResourceName
	}, func(i int) []string {
		return mapSlice(r.Resources[i].Configs, func(c kmsg.IncrementalAlterConfigsRequestResourceConfig) string { return c.Name })
	})
	if refused == nil {
		return nil
	}
	resp := kmsg.NewPtrIncrementalAlterConfigsResponse()
	for _, rr := range refused {
		resp.Resources = append(resp.Resources, kmsg.IncrementalAlterConfigsResponseResource(rr))
	}
	return resp
}

func (a *adminCheck) alterConfigs(r *kmsg.AlterConfigsRequest) kmsg.Response {
	// AlterConfigs replaces every config of the resource: any synced key it omits would be
	// reset, so it is refused outright on mirror topics.
	all := []string{"(all configs: AlterConfigs replaces the whole set)"}
	refused := a.refusedResources(len(r.Resources), func(i int) (kmsg.ConfigResourceType, string) {
		return r.Resources[i].ResourceType, r.Resources[i].ResourceName
	}, func(int) []string { return all })
	if refused == nil {
		return nil
	}
	resp := kmsg.NewPtrAlterConfigsResponse()
	resp.Resources = refused
	return resp
}

// refusedResources answers every resource of a config request with its refusal once one is
// refused, else returns nil. resource gives resource i's type and name, keys the configs it
// changes. Both config APIs' response resources have the same fields, so AlterConfigs' type
// serves IncrementalAlterConfigs too.
func (a *adminCheck) refusedResources(n int, resource func(i int) (kmsg.ConfigResourceType, string), keys func(i int) []string) []kmsg.AlterConfigsResponseResource {
	names := make([]string, n)
	for i := range n {
		_, names[i] = resource(i)
	}
	reasons := a.collect(names, func(i int, name string) string {
		typ, _ := resource(i)
		return a.configWhy(int8(typ), name, keys(i))
	})
	if reasons == nil {
		return nil
	}
	out := make([]kmsg.AlterConfigsResponseResource, n)
	for i := range out {
		out[i] = kmsg.NewAlterConfigsResponseResource()
		out[i].ResourceType, out[i].ResourceName = resource(i)
		out[i].ErrorCode, out[i].ErrorMessage = a.code, kmsg.StringPtr(reasons[i])
	}
	return out
}

// MirrorNameConfig is the read-only entry DescribeConfigs shows on mirror
// topics, so admin tools reveal why a topic refuses writes.
const MirrorNameConfig = "mirror.name"

// DecorateDescribeConfigs adds mirror.name to the configs of read-only mirror
// topics; it reports whether it changed the response.
func (g *Guard) DecorateDescribeConfigs(resp *kmsg.DescribeConfigsResponse) bool {
	set := g.set.Load()
	if set.Empty() {
		return false
	}
	changed := false
	for i := range resp.Resources {
		res := &resp.Resources[i]
		if int8(res.ResourceType) != topicResource || res.ErrorCode != 0 {
			continue
		}
		mirror := set.Mirror(res.ResourceName)
		if mirror == "" {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name, c.Value, c.ReadOnly = MirrorNameConfig, kmsg.StringPtr(mirror), true
		c.Source = kmsg.ConfigSourceDynamicTopicConfig
		c.Documentation = kmsg.StringPtr("The mirror that copies this topic from its source cluster; the topic is read-only until it is failed over.")
		res.Configs = append(res.Configs, c)
		changed = true
	}
	return changed
}
