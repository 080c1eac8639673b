package kafkatest

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// Version is an Apache Kafka release, major.minor.patch, as Maven Central names it.
type Version struct{ Major, Minor, Patch int }

// ParseVersion reads "4.4.0" (or "3.9", patch 0).
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("kafkatest: Kafka version %q: want MAJOR.MINOR[.PATCH], e.g. %s", s, KafkaVersion)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("kafkatest: Kafka version %q: %q is not a number", s, p)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// KRaft reports whether the release runs KRaft in production (3.3 and newer).
func (v Version) KRaft() bool { return v.AtLeast(3, 3) }

// ZooKeeper reports whether the release can run with ZooKeeper (every release before 4.0).
func (v Version) ZooKeeper() bool { return !v.AtLeast(4, 0) }

// Supported says why the harness cannot run v in the given mode, or nil.
func (v Version) Supported(zk bool) error {
	switch {
	case !v.AtLeast(2, 8):
		return fmt.Errorf("kafkatest: Kafka %s: the harness runs 2.8 and newer (older releases do not start on Java 17)", v)
	case zk && !v.ZooKeeper():
		return fmt.Errorf("kafkatest: Kafka %s has no ZooKeeper mode (removed in 4.0); drop WithZooKeeper/--zookeeper", v)
	case !zk && !v.KRaft():
		return fmt.Errorf("kafkatest: Kafka %s has no production KRaft mode (3.3+); use WithZooKeeper/--zookeeper", v)
	}
	return nil
}

//go:embed pom-zk.xml
var pomZKXML []byte

// pomFor is the pom that resolves v's broker jars: pom.xml (4.x: kafka-tools, log4j 2) or
// pom-zk.xml (2.x/3.x: the broker with its ZooKeeper, logging bridged to log4j 2), with the
// version put in.
func pomFor(v Version) []byte {
	pom, pinned := pomXML, KafkaVersion
	if v.ZooKeeper() {
		pom, pinned = pomZKXML, legacyPomVersion
	}
	return bytes.Replace(pom, []byte("<kafka.version>"+pinned+"</kafka.version>"),
		[]byte("<kafka.version>"+v.String()+"</kafka.version>"), 1)
}

// legacyPomVersion is the version written in pom-zk.xml, replaced by pomFor.
const legacyPomVersion = "3.9.1"

// JarsFor resolves Apache Kafka v's broker jars into a cache directory of that version's own
// (once; later runs reuse it) and returns the directory that holds them.
func JarsFor(ctx context.Context, v Version) (string, error) {
	return resolve(ctx, "kafka-"+v.String(), "Apache Kafka "+v.String(), pomFor(v))
}
