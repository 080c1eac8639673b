package kafkatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// A SASL cluster (RealConfig.SASL, WithSASL) is the smallest real setup in which "who may do
// what" is the broker's question: every client listener is SASL_PLAINTEXT with SCRAM-SHA-512
// and PLAIN, the StandardAuthorizer refuses whatever no ACL allows, and the harness creates
// its users before any client connects:
//
//   - admin and kmirror are super users (kmirror is the identity kmirror itself uses);
//   - alice, and every user added with SASLUser, may READ, WRITE and DESCRIBE any topic, READ
//     any group and WRITE and DESCRIBE any transactional id, and nothing on CLUSTER: a client
//     that is refused a mirror RPC or a write to kmirror's internals through the proxy is
//     refused by the proxy, not by the broker.
//
// Every password is "<name>-secret" unless SASLUser gives one. SCRAM credentials are written
// into the metadata log at format time (kafka-storage format --add-scram), so they exist
// before the first broker serves; PLAIN users live in the listeners' JAAS configs.
//
// Controller traffic uses its own CONTROLLER listener with SASL PLAIN as admin (KRaft
// controllers cannot use SCRAM, whose credentials live in the metadata they serve), and
// brokers talk to each other on the client listener with PLAIN as admin: there is no
// unauthenticated listener at all. Extra listeners (WithListener) are SASL_PLAINTEXT with the
// same users too.

// Harness users every SASL cluster has.
const (
	AdminUser   = "admin"
	KmirrorUser = "kmirror"
	AliceUser   = "alice"
)

// Mechanisms the harness clusters enable, as Kafka names them.
const (
	MechanismSCRAM = "SCRAM-SHA-512"
	MechanismPLAIN = "PLAIN"
)

// saslListener is the name (and security protocol) of a SASL cluster's client listener.
const saslListener = "SASL_PLAINTEXT"

// User is one more SASL user of a real cluster, granted like alice.
type User struct {
	Name, Password string
}

// WithSASL makes a real cluster's client listener SASL_PLAINTEXT (SCRAM-SHA-512 and PLAIN)
// with the StandardAuthorizer, super users admin and kmirror and the ordinary user alice (see
// the package's SASL notes in sasl.go). kfake has no authoriser: Start fails the test.
func WithSASL() Option { return func(c *config) { c.sasl = true } }

// SASLUser adds a user with the given password and alice's grants to a SASL cluster (it
// implies WithSASL). Names and passwords are limited to letters, digits, '.', '_' and '-', so
// that they need no quoting in JAAS configs, --add-scram or kcat arguments.
func SASLUser(name, password string) Option {
	return func(c *config) {
		c.sasl = true
		c.users = append(c.users, User{Name: name, Password: password})
	}
}

var userChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// saslUsers lists every user of a SASL cluster: the harness users, then the extra ones in the
// order given. It refuses names and passwords that would need quoting, and duplicates.
func saslUsers(extra []User) ([]User, error) {
	users := []User{
		{AdminUser, AdminUser + "-secret"},
		{KmirrorUser, KmirrorUser + "-secret"},
		{AliceUser, AliceUser + "-secret"},
	}
	seen := map[string]bool{AdminUser: true, KmirrorUser: true, AliceUser: true}
	for _, u := range extra {
		if !userChars.MatchString(u.Name) || !userChars.MatchString(u.Password) {
			return nil, fmt.Errorf("kafkatest: SASL user %q: name and password must match %s", u.Name, userChars)
		}
		if seen[u.Name] {
			return nil, fmt.Errorf("kafkatest: SASL user %q is defined twice (admin, kmirror and alice always exist)", u.Name)
		}
		seen[u.Name] = true
		users = append(users, u)
	}
	return users, nil
}

// saslServerProperties are the broker settings of a SASL cluster besides listeners, for the
// client listener and the extra listeners named.
func saslServerProperties(users []User, listenerNames []string) map[string]string {
	admin := users[0]
	plainServer := fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required username="%s" password="%s"`, admin.Name, admin.Password)
	controllerServer := plainServer + fmt.Sprintf(` user_%s="%s";`, admin.Name, admin.Password)
	for _, u := range users {
		plainServer += fmt.Sprintf(` user_%s="%s"`, u.Name, u.Password)
	}
	plainServer += ";"
	supers := []string{"User:" + AdminUser, "User:" + KmirrorUser}
	props := map[string]string{
		"authorizer.class.name":                            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"allow.everyone.if.no.acl.found":                   "false",
		"super.users":                                      strings.Join(supers, ";"),
		"sasl.enabled.mechanisms":                          MechanismSCRAM + "," + MechanismPLAIN,
		"sasl.mechanism.inter.broker.protocol":             MechanismPLAIN,
		"sasl.mechanism.controller.protocol":               MechanismPLAIN,
		"inter.broker.listener.name":                       saslListener,
		"listener.name.controller.sasl.enabled.mechanisms": MechanismPLAIN,
		"listener.name.controller.plain.sasl.jaas.config":  controllerServer,
	}
	for _, l := range append([]string{saslListener}, listenerNames...) {
		prefix := "listener.name." + strings.ToLower(l) + "."
		props[prefix+"plain.sasl.jaas.config"] = plainServer
		props[prefix+"scram-sha-512.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	}
	return props
}

// scramFormatArgs are kafka-storage format's arguments that create the SCRAM users.
func scramFormatArgs(users []User) []string {
	var args []string
	for _, u := range users {
		args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", MechanismSCRAM, u.Name, u.Password))
	}
	return args
}

// saslMechanism returns franz-go's mechanism for a user.
func saslMechanism(u User, mechanism string) (sasl.Mechanism, error) {
	switch mechanism {
	case MechanismSCRAM:
		return scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism(), nil
	case MechanismPLAIN:
		return plain.Auth{User: u.Name, Pass: u.Password}.AsMechanism(), nil
	}
	return nil, fmt.Errorf("kafkatest: SASL mechanism %q: the harness enables %s and %s", mechanism, MechanismSCRAM, MechanismPLAIN)
}

// user finds a user of a SASL cluster.
func (c *RealCluster) user(name string) (User, error) {
	if !c.cfg.SASL {
		return User{}, fmt.Errorf("kafkatest: user %q: the cluster has no SASL (start it with WithSASL)", name)
	}
	for _, u := range c.users {
		if u.Name == name {
			return u, nil
		}
	}
	return User{}, fmt.Errorf("kafkatest: no SASL user %q (admin, kmirror, alice, or one added with SASLUser)", name)
}

// UserOpts returns franz-go options that authenticate as user with mechanism (SCRAM-SHA-512
// or PLAIN).
func (c *RealCluster) UserOpts(user, mechanism string) ([]kgo.Opt, error) {
	u, err := c.user(user)
	if err != nil {
		return nil, err
	}
	m, err := saslMechanism(u, mechanism)
	if err != nil {
		return nil, err
	}
	return []kgo.Opt{kgo.SASL(m)}, nil
}

// adminOpts are the options the harness's own clients use: admin on a SASL cluster, nothing
// otherwise.
func (c *RealCluster) adminOpts() []kgo.Opt {
	if !c.cfg.SASL {
		return nil
	}
	opts, err := c.UserOpts(AdminUser, MechanismSCRAM)
	if err != nil {
		panic(err) // admin always exists on a SASL cluster
	}
	return opts
}

// SASL reports whether the cluster's client listeners are SASL_PLAINTEXT.
func (c *RealCluster) SASL() bool { return c.cfg.SASL }

// Password returns a SASL user's password.
func (c *RealCluster) Password(user string) (string, error) {
	u, err := c.user(user)
	return u.Password, err
}

// DirectAddrs lists the brokers' client listener addresses: straight to the brokers,
// bypassing any kmirror in front of them. It is Bootstrap, named for what tests mean by it.
func (c *RealCluster) DirectAddrs() []string { return c.Bootstrap() }

// PropertiesFile is the path of a Kafka client properties file that authenticates as user
// with SCRAM-SHA-512 (security.protocol, sasl.mechanism, sasl.jaas.config), for Kafka's Java
// tools (--command-config, --producer.config, --consumer.config). It is written when the
// cluster starts, for every user; "" when user does not exist.
func (c *RealCluster) PropertiesFile(user string) string {
	return c.PropertiesFileMechanism(user, MechanismSCRAM)
}

// PropertiesFileMechanism is PropertiesFile for a mechanism: SCRAM-SHA-512 files are
// <user>.properties, PLAIN files <user>-plain.properties, in the cluster's directory.
func (c *RealCluster) PropertiesFileMechanism(user, mechanism string) string {
	if _, err := c.user(user); err != nil {
		return ""
	}
	name := user + ".properties"
	if mechanism == MechanismPLAIN {
		name = user + "-plain.properties"
	}
	return filepath.Join(c.cfg.Dir, name)
}

// ClientProperties are Kafka client properties that authenticate as u with mechanism.
func ClientProperties(u User, mechanism string) string {
	module := "org.apache.kafka.common.security.scram.ScramLoginModule"
	if mechanism == MechanismPLAIN {
		module = "org.apache.kafka.common.security.plain.PlainLoginModule"
	}
	return fmt.Sprintf("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=%s\nsasl.jaas.config=%s required username=\"%s\" password=\"%s\";\n",
		mechanism, module, u.Name, u.Password)
}

// writeProperties writes every user's client properties files into the cluster's directory
// (readable by the owner only: they hold passwords).
func (c *RealCluster) writeProperties() error {
	for _, u := range c.users {
		for _, m := range []string{MechanismSCRAM, MechanismPLAIN} {
			path := c.PropertiesFileMechanism(u.Name, m)
			if err := os.WriteFile(path, []byte(ClientProperties(u, m)), 0o600); err != nil {
				return fmt.Errorf("kafkatest: write %s: %w", path, err)
			}
		}
	}
	return nil
}

// KcatArgs are kcat's -X arguments that authenticate as u with mechanism.
func KcatArgs(u User, mechanism string) []string {
	return []string{
		"-X", "security.protocol=SASL_PLAINTEXT",
		"-X", "sasl.mechanisms=" + mechanism,
		"-X", "sasl.username=" + u.Name,
		"-X", "sasl.password=" + u.Password,
	}
}

// grantACLs creates the ordinary users' ACLs as admin and waits until every broker's
// authoriser has them, so that the first test client is judged by them.
func (c *RealCluster) grantACLs(ctx context.Context) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Bootstrap()...)}, c.adminOpts()...)...)
	if err != nil {
		return fmt.Errorf("kafkatest: admin client for ACLs: %w", err)
	}
	defer cl.Close()
	var want []kmsg.CreateACLsRequestCreation
	for _, u := range c.users {
		if u.Name == AdminUser || u.Name == KmirrorUser {
			continue
		}
		want = append(want, userCreations("User:"+u.Name)...)
	}
	req := kmsg.NewPtrCreateACLsRequest()
	req.Creations = want
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkatest: create ACLs: %w", err)
	}
	for i, r := range resp.Results {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("kafkatest: create ACL %+v: %w", want[i], err)
		}
	}
	for _, id := range c.NodeIDs() {
		if err := waitACLs(ctx, cl, id, len(want)); err != nil {
			return err
		}
	}
	return nil
}

// userCreations are one ordinary user's ACLs: READ, WRITE, DESCRIBE on TOPIC *; READ on
// GROUP *; WRITE, DESCRIBE on TRANSACTIONAL_ID *.
func userCreations(principal string) []kmsg.CreateACLsRequestCreation {
	grants := []struct {
		resource kmsg.ACLResourceType
		ops      []kmsg.ACLOperation
	}{
		{kmsg.ACLResourceTypeTopic, []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe}},
		{kmsg.ACLResourceTypeGroup, []kmsg.ACLOperation{kmsg.ACLOperationRead}},
		{kmsg.ACLResourceTypeTransactionalId, []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe}},
	}
	var out []kmsg.CreateACLsRequestCreation
	for _, g := range grants {
		for _, op := range g.ops {
			cr := kmsg.NewCreateACLsRequestCreation()
			cr.ResourceType = g.resource
			cr.ResourceName = "*"
			cr.ResourcePatternType = kmsg.ACLResourcePatternTypeLiteral
			cr.Principal = principal
			cr.Host = "*"
			cr.Operation = op
			cr.PermissionType = kmsg.ACLPermissionTypeAllow
			out = append(out, cr)
		}
	}
	return out
}

// waitACLs polls broker id until its authoriser lists n ALLOW bindings (a broker learns ACLs
// from the metadata log, a moment after the controller accepted them).
func waitACLs(ctx context.Context, cl *kgo.Client, id int32, n int) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		req := kmsg.NewPtrDescribeACLsRequest()
		req.ResourceType = kmsg.ACLResourceTypeAny
		req.ResourcePatternType = kmsg.ACLResourcePatternTypeAny
		req.Operation = kmsg.ACLOperationAny
		req.PermissionType = kmsg.ACLPermissionTypeAny
		resp, err := req.RequestWith(ctx, cl.Broker(int(id)))
		got := 0
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
			for _, r := range resp.Resources {
				got += len(r.ACLs)
			}
		}
		if err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: broker %d lists %d of %d ACLs after %s (last error: %v)", id, got, n, startTimeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hasSASL reports whether a client was given a SASL mechanism.
func hasSASL(cl *kgo.Client) bool {
	ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	return len(ms) > 0
}

// saslUser fails the test unless the cluster is a SASL cluster with user, and returns it.
func (c *Cluster) saslUser(user string) User {
	c.t.Helper()
	if c.real == nil {
		c.t.Fatalf("kafkatest: SASL user %q: kfake clusters have no SASL", user)
	}
	u, err := c.real.user(user)
	if err != nil {
		c.t.Fatal(err)
	}
	return u
}

// UserOpts returns franz-go options that authenticate as user with SCRAM-SHA-512; the test
// fails when the cluster has no SASL or no such user.
func (c *Cluster) UserOpts(user string) []kgo.Opt {
	c.t.Helper()
	return c.UserOptsMechanism(user, MechanismSCRAM)
}

// UserOptsMechanism is UserOpts with a mechanism: SCRAM-SHA-512 or PLAIN.
func (c *Cluster) UserOptsMechanism(user, mechanism string) []kgo.Opt {
	c.t.Helper()
	m, err := saslMechanism(c.saslUser(user), mechanism)
	if err != nil {
		c.t.Fatal(err)
	}
	return []kgo.Opt{kgo.SASL(m)}
}

// Password returns user's password.
func (c *Cluster) Password(user string) string {
	c.t.Helper()
	return c.saslUser(user).Password
}

// KcatArgs are kcat's -X arguments that authenticate as user. They use PLAIN, not
// SCRAM-SHA-512: librdkafka before 2.6.1 (Debian's kcat 1.7.1 links 2.0.2) sends a wrong
// nonce in SCRAM's final message, which Kafka accepts no more since 3.8.1 and 4.0
// (CVE-2024-56128; librdkafka#4895, kcat#462): SCRAM fails with "invalid credentials".
func (c *Cluster) KcatArgs(user string) []string {
	c.t.Helper()
	return KcatArgs(c.saslUser(user), MechanismPLAIN)
}

// KcatArgsMechanism is KcatArgs with a mechanism: SCRAM-SHA-512 (librdkafka 2.6.1 or later)
// or PLAIN.
func (c *Cluster) KcatArgsMechanism(user, mechanism string) []string {
	c.t.Helper()
	if _, err := saslMechanism(c.saslUser(user), mechanism); err != nil {
		c.t.Fatal(err)
	}
	return KcatArgs(c.saslUser(user), mechanism)
}
