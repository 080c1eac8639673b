package mirrorcli

// --alter and --describe --configs: a mirror's configs are a config
// resource of type 64 (CLUSTER_MIRROR in the Cluster Mirroring proposal),
// changed with IncrementalAlterConfigs and read with DescribeConfigs, which
// the kmirror proxy answers itself.

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
)

const mirrorResourceType = 64

func (r *runner) alter(ctx context.Context, fromFile []protocol.CreateMirrorRequestConfig) error {
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = mirrorResourceType, r.a.Mirror
	set := func(k, v string) {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Op, c.Name, c.Value = kmsg.IncrementalAlterConfigOpSet, k, kmsg.StringPtr(v)
		res.Configs = append(res.Configs, c)
	}
	for _, c := range fromFile {
		set(c.Name, *c.Value)
	}
	for _, kv := range r.a.AddConfig {
		set(kv.Key, kv.Value)
	}
	for _, k := range r.a.DeleteConfig {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Op, c.Name = kmsg.IncrementalAlterConfigOpDelete, k
		res.Configs = append(res.Configs, c)
	}
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.Resources = append(req.Resources, res)
	resp, err := r.c.request(ctx, req)
	if err != nil {
		return err
	}
	for _, rr := range resp.(*kmsg.IncrementalAlterConfigsResponse).Resources {
		if err := protocol.ResponseError(rr.ErrorCode, rr.ErrorMessage); err != nil {
			return fmt.Errorf("mirror %s: %w", r.a.Mirror, err)
		}
	}
	fmt.Fprintf(r.out, "Changed %s of mirror %s.\n", plural(len(res.Configs), "config"), r.a.Mirror)
	return nil
}

// configValueWidth is how much of a config value --describe --configs
// shows without --full: a list of patterns or ACL rules can run to hundreds
// of characters and would wrap every row of the table.
const configValueWidth = 60

func (r *runner) describeConfigs(ctx context.Context) error {
	resources, err := r.mirrorConfigs(ctx, []string{r.a.Mirror})
	if err != nil {
		return err
	}
	shortened := false
	for _, rr := range resources {
		cs := rr.Configs
		sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
		w := tabwriter.NewWriter(r.out, 0, 8, 2, ' ', 0)
		fmt.Fprintln(w, "CONFIG\tVALUE\tSOURCE")
		for _, c := range cs {
			v, source := "", "set"
			switch {
			case c.IsSensitive:
				v = "******"
			case c.Value != nil:
				v = *c.Value
			}
			if !r.a.Full && len([]rune(v)) > configValueWidth {
				v, shortened = string([]rune(v)[:configValueWidth-1])+"…", true
			}
			if c.Source == kmsg.ConfigSourceDefaultConfig {
				source = "default"
			}
			if c.ReadOnly {
				source += ", fixed"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, v, source)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if shortened {
		fmt.Fprintf(r.out, "Values longer than %d characters end in …; --full prints them whole.\n", configValueWidth)
	}
	return nil
}
