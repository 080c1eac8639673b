package protocol

// The mirror RPC messages themselves are generated (generated.go, from
// definitions/1005_describe_mirrors.def); this file adds what a client of
// DescribeMirrors computes from them: the recovery point totals.

// FailingOver reports whether the partition's failover has begun (STOPPING
// or STOPPED): nothing more is at risk from a failover, it is under way.
func (v *DescribeMirrorsResponsePartition) FailingOver() bool {
	return v.State == MirrorStateStopping.String() || v.State == MirrorStateStopped.String()
}

// AtRisk totals what a failover right now would lose over partitions: the
// records summed, the oldest age the largest. Partitions already failing
// over are not counted; those whose figures are unknown are counted in
// Unknown, which makes the totals a lower bound.
type AtRisk struct {
	Records    int64 // sum of the known RecordsAtRisk
	AgeMs      int64 // largest known AtRiskAgeMs; 0 when nothing is at risk
	Partitions int   // partitions counted (not failing over)
	Behind     int   // partitions with records at risk
	Unknown    int   // partitions counted whose figures are unknown
	FailedOver int   // partitions not counted: STOPPING or STOPPED
}

// Add counts one partition.
func (r *AtRisk) Add(p *DescribeMirrorsResponsePartition) {
	if p.FailingOver() {
		r.FailedOver++
		return
	}
	r.Partitions++
	if p.RecordsAtRisk < 0 || (p.RecordsAtRisk > 0 && p.AtRiskAgeMs < 0) {
		r.Unknown++
	}
	if p.RecordsAtRisk > 0 {
		r.Behind++
		r.Records += p.RecordsAtRisk
	}
	r.AgeMs = max(r.AgeMs, p.AtRiskAgeMs)
}

// Merge adds another total.
func (r *AtRisk) Merge(o AtRisk) {
	r.Records += o.Records
	r.AgeMs = max(r.AgeMs, o.AgeMs)
	r.Partitions += o.Partitions
	r.Behind += o.Behind
	r.Unknown += o.Unknown
	r.FailedOver += o.FailedOver
}

// AtRisk totals the topic's partitions.
func (v *DescribeMirrorsResponseTopic) AtRisk() AtRisk {
	var r AtRisk
	for i := range v.Partitions {
		r.Add(&v.Partitions[i])
	}
	return r
}

// AtRisk totals the mirror's topics.
func (v *DescribeMirrorsResponseMirror) AtRisk() AtRisk {
	var r AtRisk
	for i := range v.Topics {
		r.Merge(v.Topics[i].AtRisk())
	}
	return r
}
