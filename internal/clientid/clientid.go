// Package clientid names every Kafka client kmirror makes, so that an operator
// of either cluster can tell kmirror's traffic apart in broker logs and request
// metrics and cap it with Kafka's own client quotas (`kafka-configs
// --entity-type clients --entity-name ...`; docs/proxy.md, "Throttling").
//
// On the source, every connection made for a mirror (its copy's fetches, topic
// discovery, the sync jobs, describe's offsets) says Source(mirror): one id per
// mirror, the same on every instance. Kafka applies a client-id quota to all
// connections with that id together on each broker, so one quota caps the
// mirror as a whole however many instances share its partitions; an instance
// suffix would split the mirror into ids that come and go with instances,
// which no quota entity could name in advance (quota entity names match
// exactly, there is no prefix match).
//
// On the destination the mirror's data writes (Produce, transaction control)
// say Writer(mirror), and the shared control-plane clients have one fixed id
// each, so a destination quota on a mirror's writes never slows the state
// topic, the coordinator group or the admin requests.
package clientid

import (
	"fmt"
	"regexp"
)

// Fixed ids of the destination's control-plane clients, the same on every
// instance.
const (
	// State reads and writes __mirror_state and its marks topic and holds the
	// coordinator group membership.
	State = "kmirror-state"
	// Admin is the rest of kmirror's own destination traffic (topic
	// creation and checks, offsets, ACLs, failover, the read-only guard's
	// topic-id lookups) and one-off source clients that belong to no
	// mirror yet (CreateMirror's reachability check).
	Admin = "kmirror-admin"
	// Identities takes the partitions' writer identities (InitProducerId).
	Identities = "kmirror-identities"
)

// Prefix starts every id kmirror gives itself.
const Prefix = "kmirror-"

// Source is the client id of every source connection of mirror: override
// (the mirror config source.client.id) when set, else kmirror-<mirror>.
func Source(mirror, override string) string {
	if override != "" {
		return override
	}
	return Prefix + mirror
}

// Writer is the client id of mirror's data writes to the destination.
func Writer(mirror string) string { return Prefix + mirror + "-writer" }

// validRE is what Check accepts: Kafka's legal characters of a topic name,
// which survive a shell command line, JMX metric names and quota entity
// names unescaped.
var validRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,255}$`)

// Check validates a client id given by an operator.
func Check(id string) error {
	if !validRE.MatchString(id) {
		return fmt.Errorf("use 1 to 255 characters from a-z, A-Z, 0-9, '.', '_' and '-'")
	}
	return nil
}
