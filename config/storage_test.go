package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestRuleStorageNATS: [storage] backend = "nats" with a valid
// [storage.nats] loads as written; every bad key is reported at once, at
// its file:line:col.
func TestRuleStorageNATS(t *testing.T) {
	cfg, _, problems := loadSrc(t, `
[storage]
backend = "nats"
[storage.nats]
servers = ["nats://nats-1:4222", "tls://nats-2:4222"]
credentials_file = "/etc/ctxd/fleet.creds"
replicas = 3
prefix = "ctxd-prod"
ack_wait_ms = 240000
`)
	if len(problems) > 0 {
		t.Fatalf("valid config refused: %v", problems)
	}
	want := StorageNATS{Servers: []string{"nats://nats-1:4222", "tls://nats-2:4222"}, CredentialsFile: "/etc/ctxd/fleet.creds", Replicas: 3, Prefix: "ctxd-prod", AckWaitMS: 240000}
	if cfg.Storage.Backend != BackendNATS || !reflect.DeepEqual(cfg.Storage.NATS, want) {
		t.Fatalf("loaded %+v", cfg.Storage)
	}

	_, _, problems = loadSrc(t, `
[storage]
backend = "nats"
[storage.nats]
servers = ["nats-1:4222", "http://nats-2:4222", "nats://u:p@nats-3:4222"]
credentials_file = "/etc/ctxd/fleet.creds"
token_env = "CTXD_NATS_TOKEN"
replicas = 2
prefix = "ctxd.prod"
ack_wait_ms = 1000
`)
	wantProblems(t, problems,
		":5:1: storage.nats.servers[0]: must be a URL with a host and port",
		":5:1: storage.nats.servers[1]: scheme \"http\"",
		":5:1: storage.nats.servers[2]: must not carry credentials",
		":7:1: storage.nats.token_env: set at most one of credentials_file and token_env",
		":8:1: storage.nats.replicas: must be 1, 3 or 5",
		":9:1: storage.nats.prefix: must be 1 to 32 characters",
		":10:1: storage.nats.ack_wait_ms: must be at least 10000",
	)
	runRuleCases(t, []ruleCase{
		{name: "nats without servers", src: "[storage]\nbackend = \"nats\"\n", only: true,
			key: "storage.nats.servers", pos: "", msg: "missing required key"},
		{name: "unknown backend", src: "[storage]\nbackend = \"etcd\"\n", only: true,
			key: "storage.backend", pos: "2:1", msg: `must be "badger"`},
		{name: "unknown key", src: "[storage.nats]\nserver = \"nats://x:4222\"\n",
			key: "storage.nats.server", pos: "2:1", msg: "unknown key"},
		{name: "session memory under 1 MiB", src: "[storage]\nsession_memory_bytes = 65536\n", only: true,
			key: "storage.session_memory_bytes", pos: "2:1", msg: "must be at least 1048576"},
	})
}

// TestRuleStorageNATSBounds: an out-of-range server port, an
// ack_wait_ms that would overflow its duration, an empty prefix and an
// empty servers list each get file:line:col and the key; [storage.nats]
// under the badger backend is a warning.
func TestRuleStorageNATSBounds(t *testing.T) {
	_, _, problems := loadSrc(t, `
[storage]
backend = "nats"
[storage.nats]
servers = ["nats://127.0.0.1:99999", "nats://127.0.0.1:4222"]
prefix = ""
ack_wait_ms = 9223372036854775807
`)
	wantProblems(t, problems,
		":5:1: storage.nats.servers[0]: port \"99999\": must be 1 to 65535",
		":6:1: storage.nats.prefix: must be 1 to 32 characters",
		":7:1: storage.nats.ack_wait_ms: must be at most 86400000",
	)
	if strings.Contains(dump(problems), "servers[1]") || len(problems) != 3 {
		t.Errorf("want exactly 3 problems:\n%s", dump(problems))
	}
	runRuleCases(t, []ruleCase{
		{name: "servers = []", src: "[storage]\nbackend = \"nats\"\n[storage.nats]\nservers = []\n", only: true,
			key: "storage.nats.servers", pos: "4:1", msg: "must list at least one server"},
	})
	cfg, _, problems := loadSrc(t, "[storage.nats]\nack_wait_ms = 86400000\nservers = [\"nats://n:4222\"]\n")
	if len(problems) != 0 || cfg.Storage.NATS.AckWaitMS != MaxNATSAckWaitMS {
		t.Fatalf("the bound itself: %v", problems)
	}
}

// TestStorageNATSIgnoredUnderBadgerWarns: [storage.nats] with
// the default backend loads but warns at the table that it is ignored.
func TestStorageNATSIgnoredUnderBadgerWarns(t *testing.T) {
	_, warnings, problems := loadSrc(t, "[storage]\nbackend = \"badger\"\n[storage.nats]\nservers = [\"nats://n:4222\"]\n")
	if len(problems) != 0 || len(warnings) != 1 || !strings.Contains(warnings[0].String(), "storage.nats: is ignored: storage.backend is \"badger\"") {
		t.Fatalf("problems %v, warnings %v", problems, warnings)
	}
	_, warnings, _ = loadSrc(t, "[storage]\nbackend = \"badger\"\n")
	if len(warnings) != 0 {
		t.Fatalf("no [storage.nats]: warnings %v", warnings)
	}
}
