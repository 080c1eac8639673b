package fetcher

// Helpers shared by the source and the sink to build a request with one
// entry per topic and to find a partition's answer in a response.

// groupByTopic groups items into one request entry per topic, in first-seen
// order: mk makes a topic's entry from its first item, add adds an item's
// partition to its topic's entry.
func groupByTopic[X, T any](items []X, topic func(X) string, mk func(X) T, add func(*T, X)) []T {
	var out []T
	ix := map[string]int{}
	for _, it := range items {
		i, ok := ix[topic(it)]
		if !ok {
			out = append(out, mk(it))
			i = len(out) - 1
			ix[topic(it)] = i
		}
		add(&out[i], it)
	}
	return out
}

// answerKey names a partition in a Fetch or Produce response: by topic id
// from version 13 on (the name is then empty), by name before.
type answerKey struct {
	topic     string
	id        [16]byte
	partition int32
}

func answerKeyOf(version int16, tp topicPartition, id [16]byte) answerKey {
	if version >= 13 {
		return answerKey{"", id, tp.partition}
	}
	return answerKey{tp.topic, [16]byte{}, tp.partition}
}

// indexAnswers maps every partition of a response to its answer; topic
// gives a response topic's name, id and partitions, partition a partition's
// number.
func indexAnswers[T, P any](topics []T, topic func(*T) (string, [16]byte, []P), partition func(*P) int32) map[answerKey]*P {
	got := map[answerKey]*P{}
	for i := range topics {
		name, id, ps := topic(&topics[i])
		for j := range ps {
			got[answerKey{name, id, partition(&ps[j])}] = &ps[j]
		}
	}
	return got
}
