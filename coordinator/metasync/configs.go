package metasync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/internal/plural"
)

// ExcludedConfig is the rule for topic configs the sync never sets nor
// deletes on the destination: the mirror's topic.properties.exclude, the
// data path's default exclusions, the configs it forces on every mirror
// topic (they keep batches byte for byte) and mirror.* names (the proxy
// reports mirror.name itself; the broker has no such config).
func ExcludedConfig(mirrorExcluded map[string]bool) func(name string) bool {
	return func(name string) bool {
		_, forced := mirrorconfig.ForcedTopicConfigs[name]
		return forced || mirrorExcluded[name] || mirrorconfig.DefaultExcludedConfig(name) || strings.HasPrefix(name, "mirror.")
	}
}

// ConfigChanges is what a destination topic needs for its dynamic configs
// to equal the source's: SET for configs the source sets to another value,
// DELETE for configs set only on the destination. Sensitive configs are
// left alone: their values are never returned, so they cannot be compared.
func ConfigChanges(src, dst []kadm.Config, excluded func(string) bool) []kadm.AlterConfig {
	want := dynamic(src, excluded)
	have := dynamic(dst, excluded)
	var out []kadm.AlterConfig
	for _, k := range sortedKeys(want) {
		if v, ok := have[k]; !ok || v != want[k] {
			v := want[k]
			out = append(out, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
		}
	}
	for _, k := range sortedKeys(have) {
		if _, ok := want[k]; !ok {
			out = append(out, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
		}
	}
	return out
}

// dynamic is a topic's own (DYNAMIC_TOPIC_CONFIG) configs that the sync
// may touch.
func dynamic(cs []kadm.Config, excluded func(string) bool) map[string]string {
	out := map[string]string{}
	for _, c := range cs {
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig && !c.Sensitive && c.Value != nil && !excluded(c.Key) {
			out[c.Key] = *c.Value
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ConfigResult is what a topic config sync did.
type ConfigResult struct {
	Topics, Set, Deleted int
}

func (r ConfigResult) String() string {
	return fmt.Sprintf("%s compared, %s set, %d deleted", plural.Of(r.Topics, "topic"), plural.Of(r.Set, "config"), r.Deleted)
}

// SyncTopicConfigs makes the destination's dynamic configs of topics follow
// the source's. Topics that fail are named in the error; the others are
// still synced.
func SyncTopicConfigs(ctx context.Context, src, dst *kadm.Client, topics []string, excluded func(string) bool) (ConfigResult, error) {
	var res ConfigResult
	if len(topics) == 0 {
		return res, nil
	}
	srcConfigs, err := src.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return res, fmt.Errorf("describing the source topics' configs: %w (the source credentials need DescribeConfigs on the topics)", err)
	}
	dstConfigs, err := dst.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return res, fmt.Errorf("describing the destination topics' configs: %w", err)
	}
	var errs []error
	for _, topic := range topics {
		s, err := topicConfigs(srcConfigs, topic)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: describing its configs on the source: %w", topic, err))
			continue
		}
		d, err := topicConfigs(dstConfigs, topic)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: describing its configs on the destination: %w", topic, err))
			continue
		}
		res.Topics++
		changes := ConfigChanges(s.Configs, d.Configs, excluded)
		if len(changes) == 0 {
			continue
		}
		resps, err := dst.AlterTopicConfigs(ctx, changes, topic)
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = fmt.Errorf("%w %s", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: altering its configs on the destination (%s): %w; exclude the config with topic.properties.exclude if the destination cannot take it",
				topic, describeChanges(changes), err))
			continue
		}
		for _, c := range changes {
			if c.Op == kadm.SetConfig {
				res.Set++
			} else {
				res.Deleted++
			}
		}
	}
	return res, errors.Join(errs...)
}

func describeChanges(cs []kadm.AlterConfig) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		if c.Op == kadm.SetConfig {
			parts[i] = "set " + c.Name + "=" + *c.Value
		} else {
			parts[i] = "delete " + c.Name
		}
	}
	return strings.Join(parts, ", ")
}

// topicConfigs is topic's entry of a describe: the describe's error for the
// topic (missing from the answer), or the broker's error for it.
func topicConfigs(described kadm.ResourceConfigs, topic string) (kadm.ResourceConfig, error) {
	c, err := described.On(topic, nil)
	if err == nil {
		err = c.Err
	}
	return c, err
}
