package fetcher

// Helpers shared by the source and the sink to build a request with one
// entry per topic and to find a partition's answer in a response.

// topicSlot is the entry of topic in a request's topics, appended (made by
// mk) the first time topic is seen; ix remembers the positions.
func topicSlot[T any](topics *[]T, ix map[string]int, topic string, mk func() T) *T {
	i, ok := ix[topic]
	if !ok {
		*topics = append(*topics, mk())
		i = len(*topics) - 1
		ix[topic] = i
	}
	return &(*topics)[i]
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
