// API keys, TLS and mTLS (issue 14 #13): an in-process server and a real
// zoomd, certificates made by the openssl CLI in the test.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/decoder_client.h"
#include "client/zoom_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/grpc/auth.h"
#include "server/grpc/zoom_server.h"
#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"
#include "zoom/v1/decoder.grpc.pb.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using ::zoom::testing::TempDir;

constexpr char kAdmin[] = "admin-key-0123456789abcdef";
constexpr char kRead[] = "read-key-0123456789abcdef";

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

int RunShell(const std::string& command) {
  const int st = std::system((command + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(ApiKeysTest, ParseAndCheck) {
  ASSERT_OK_AND_ASSIGN(server::ApiKeys keys,
                       server::ApiKeys::Parse(absl::StrCat("# keys\n\nadmin ", kAdmin, "\nread  ",
                                                           kRead, "  \n")));
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.Check(kAdmin), server::Role::kAdmin);
  EXPECT_EQ(keys.Check(kRead), server::Role::kRead);
  EXPECT_EQ(keys.Check("nope-nope-nope-nope"), server::Role::kNone);
  EXPECT_EQ(keys.Check(""), server::Role::kNone);
  EXPECT_EQ(keys.Check(std::string(kAdmin) + "x"), server::Role::kNone);
  EXPECT_THAT(server::ApiKeys::Parse("admin short").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 1")));
  EXPECT_THAT(server::ApiKeys::Parse(absl::StrCat("\nroot ", kAdmin)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2")));
  EXPECT_THAT(server::ApiKeys::Parse("# nothing\n").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no key")));
}

v1::CollectionSpec Spec(const std::string& name, uint32_t dim) {
  v1::CollectionSpec spec;
  spec.set_name(name);
  spec.set_dim(dim);
  spec.set_metric(v1::L2);
  return spec;
}

struct Secured {
  explicit Secured(server::ServerOptions o = {}) {
    key_file = dir.File("keys");
    WriteText(key_file, absl::StrCat("admin ", kAdmin, "\nread ", kRead, "\n"));
    o.database.data_dir = dir.File("data");
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "127.0.0.1:0";
    o.threads = 2;
    o.api_key_file = key_file;
    server = std::make_unique<server::ZoomServer>(o);
    status = server->Start();
  }
  std::unique_ptr<client::ZoomClient> Client(const std::string& key) const {
    client::ClientOptions c;
    c.api_key = key;
    return client::ZoomClient::Connect(target(), c);
  }
  std::string target() const { return absl::StrCat("127.0.0.1:", server->grpc_port()); }
  TempDir dir;
  std::string key_file;
  std::unique_ptr<server::ZoomServer> server;
  absl::Status status;
};

TEST(SecurityTest, KeysAndRoles) {
  Secured s;
  ASSERT_OK(s.status);
  auto none = s.Client("");
  auto reader = s.Client(kRead);
  auto admin = s.Client(kAdmin);
  auto wrong = s.Client("wrong-key-0123456789abcdef");
  // Health stays open.
  ASSERT_OK_AND_ASSIGN(std::string health, none->Health());
  EXPECT_EQ(health, "SERVING");
  EXPECT_THAT(none->ListCollections().status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("Bearer")));
  EXPECT_THAT(wrong->ListCollections().status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not valid")));
  // Admin: everything.
  ASSERT_OK(admin->CreateCollection(Spec("c", 4)).status());
  v1::UpsertRequest u;
  u.set_collection("c");
  for (int i = 0; i < 10; ++i) {
    v1::Point* p = u.add_points();
    p->set_id(i);
    const float v[4] = {float(i), 1, 2, 3};
    p->mutable_vector()->Assign(v, v + 4);
  }
  ASSERT_OK(admin->Upsert(u).status());
  // Read: the read class only.
  ASSERT_OK(reader->ListCollections().status());
  ASSERT_OK(reader->GetCollection("c").status());
  v1::SearchRequest q;
  q.set_collection("c");
  q.set_k(3);
  const float v[4] = {1, 1, 2, 3};
  q.mutable_vector()->Assign(v, v + 4);
  ASSERT_OK(reader->Search(q).status());
  v1::GetRequest g;
  g.set_collection("c");
  g.add_ids(1);
  ASSERT_OK(reader->Get(g).status());
  v1::SetPayloadRequest set_payload;
  set_payload.set_collection("c");
  set_payload.add_ids(1);
  (*set_payload.mutable_fields())["k"].set_bool_value(true);
  v1::DeletePayloadRequest delete_payload;
  delete_payload.set_collection("c");
  delete_payload.add_ids(1);
  for (const absl::Status& st :
       {reader->Upsert(u).status(), reader->CreateCollection(Spec("d", 4)).status(),
        reader->SetPayload(set_payload).status(), reader->DeletePayload(delete_payload).status(),
        reader->DropCollection("c"), reader->BuildIndex("c", true).status(),
        reader->Compact("c").status(), reader->Delete("c", {1}).status(),
        reader->Import("c", 1, [](uint64_t, v1::Point* p) {
                 p->set_id(99);
                 const float w[4] = {0, 0, 0, 1};
                 p->mutable_vector()->Assign(w, w + 4);
               }).status()}) {
    EXPECT_THAT(st, StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("admin key")));
  }
  EXPECT_THAT(none->Search(q).status(), StatusIs(absl::StatusCode::kUnauthenticated));
  // The Decoder and reflection v1 check too.
  client::DecoderClient decoder(reader->channel(), client::ClientOptions());
  EXPECT_THAT(decoder.LoadModel("m", "x", /*wait=*/false).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // The other header form: api-key.
  auto plain = v1::VectorSearch::NewStub(none->channel());
  grpc::ClientContext ctx2;
  ctx2.AddMetadata("api-key", kRead);
  v1::ListCollectionsResponse list;
  EXPECT_TRUE(plain->ListCollections(&ctx2, v1::ListCollectionsRequest(), &list).ok());
  EXPECT_EQ(list.collections_size(), 1);
}

TEST(SecurityTest, KeysReloadAndABadFileKeepsThePreviousOnes) {
  Secured s;
  ASSERT_OK(s.status);
  ASSERT_OK(s.Client(kAdmin)->ListCollections().status());
  const std::string fresh = "fresh-admin-key-0123456789";
  WriteText(s.key_file, absl::StrCat("admin ", fresh, "\n"));
  ASSERT_OK(s.server->ReloadApiKeys());
  EXPECT_THAT(s.Client(kAdmin)->ListCollections().status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  ASSERT_OK(s.Client(fresh)->ListCollections().status());
  WriteText(s.key_file, "admin tiny\n");
  EXPECT_THAT(s.server->ReloadApiKeys(), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(s.Client(fresh)->ListCollections().status());
}

TEST(SecurityTest, MetricsBehindTheAdminKey) {
  server::ServerOptions o;
  o.metrics_require_key = true;
  Secured s(o);
  ASSERT_OK(s.status);
  const int port = s.server->metrics_port();
  EXPECT_THAT(testing::HttpGet("127.0.0.1", port, "/metrics").status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("401")));
  EXPECT_THAT(testing::HttpGet("127.0.0.1", port, "/metrics", 30000,
                               absl::StrCat("Authorization: Bearer ", kRead, "\r\n"))
                  .status(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("401")));
  ASSERT_OK_AND_ASSIGN(std::string body,
                       testing::HttpGet("127.0.0.1", port, "/metrics", 30000,
                                        absl::StrCat("Authorization: Bearer ", kAdmin, "\r\n")));
  EXPECT_THAT(body, HasSubstr("zoomd_build_info"));
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, made
// with the openssl CLI.
struct Certs {
  Certs() {
    if (RunShell("openssl version") != 0) {
      ok = false;
      return;
    }
    const std::string d = dir.path();
    ok = RunShell(absl::StrCat("cd ", d,
                          " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=zoom-ca "
                          "-keyout ca.key -out ca.pem"
                          " && openssl req -newkey rsa:2048 -nodes -subj /CN=localhost "
                          "-keyout server.key -out server.csr"
                          " && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > san.ext"
                          " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
                          "-CAcreateserial -days 2 -extfile san.ext -out server.pem"
                          " && openssl req -newkey rsa:2048 -nodes -subj /CN=zoom-client "
                          "-keyout client.key -out client.csr"
                          " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
                          "-CAcreateserial -days 2 -out client.pem"
                          " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
                          "-subj /CN=other-ca -keyout other.key -out other.pem")) == 0;
  }
  std::string File(const char* name) const { return dir.File(name); }
  TempDir dir;
  bool ok = false;
};

TEST(SecurityTest, TlsAndMutualTls) {
  Certs certs;
  if (!certs.ok) GTEST_SKIP() << "the openssl CLI is missing (deploy/install-deps.sh installs it)";
  for (bool mutual : {false, true}) {
    SCOPED_TRACE(mutual ? "mTLS" : "TLS");
    TempDir dir;
    server::ServerOptions o;
    o.database.data_dir = dir.File("data");
    o.grpc_address = "127.0.0.1:0";
    o.metrics_address = "";
    o.threads = 2;
    o.tls_cert_file = certs.File("server.pem");
    o.tls_key_file = certs.File("server.key");
    if (mutual) o.tls_client_ca_file = certs.File("ca.pem");
    server::ZoomServer server(o);
    ASSERT_OK(server.Start());
    const std::string target = absl::StrCat("127.0.0.1:", server.grpc_port());
    client::ClientOptions tls;
    tls.timeout = absl::Seconds(30);
    tls.tls_ca_file = certs.File("ca.pem");
    if (mutual) {
      // Without a client certificate: refused in the handshake.
      EXPECT_FALSE(client::ZoomClient::Connect(target, tls)->ListCollections().ok());
      tls.tls_cert_file = certs.File("client.pem");
      tls.tls_key_file = certs.File("client.key");
    }
    ASSERT_OK(client::ZoomClient::Connect(target, tls)->ListCollections().status());
    // Plaintext to a TLS port fails; so does a client that does not trust
    // the server's CA.
    client::ClientOptions plain;
    plain.timeout = absl::Seconds(30);
    EXPECT_THAT(client::ZoomClient::Connect(target, plain)->ListCollections().status(),
                StatusIs(absl::StatusCode::kUnavailable));
    client::ClientOptions untrusted = tls;
    untrusted.tls_ca_file = certs.File("other.pem");  // another CA
    EXPECT_FALSE(client::ZoomClient::Connect(target, untrusted)->ListCollections().ok());
    server.Shutdown(absl::Seconds(1));
  }
  // Bad files are refused with the flag named.
  client::ClientOptions bad;
  bad.tls_ca_file = certs.File("nope.pem");
  EXPECT_THAT(client::MakeChannel("127.0.0.1:1", bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls_ca")));
  TempDir dir;
  server::ServerOptions o;
  o.database.data_dir = dir.File("data");
  o.grpc_address = "127.0.0.1:0";
  o.metrics_address = "";
  o.tls_cert_file = certs.File("server.pem");
  o.tls_key_file = certs.File("ca.srl");  // not PEM
  server::ZoomServer server(o);
  EXPECT_THAT(server.Start(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls_key")));
}

// The real zoomd: no keys on a non-loopback address is refused unless asked
// for; SIGHUP reloads the keys; zoomctl takes --api_key_file.
TEST(SecurityTest, ZoomdRefusesOpenNonLoopbackAndReloadsKeysOnSighup) {
  TempDir dir;
  {
    const std::string cmd = absl::StrCat(ZOOMD_BINARY, " --data_dir=", dir.File("d0"),
                                         " --grpc_address=0.0.0.0:0 --metrics_address=");
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    EXPECT_EQ(WEXITSTATUS(st), 1);
    EXPECT_THAT(out, HasSubstr("--api_key_file"));
  }
  const std::string keys = dir.File("keys");
  WriteText(keys, absl::StrCat("admin ", kAdmin, "\n"));
  const std::string port_file = dir.File("port");
  const std::string dd = "--data_dir=" + dir.File("d1");
  const std::string kf = "--api_key_file=" + keys;
  const std::string pf = "--port_file=" + port_file;
  const pid_t pid = fork();
  if (pid == 0) {
    execl(ZOOMD_BINARY, ZOOMD_BINARY, dd.c_str(), "--grpc_address=127.0.0.1:0",
          "--metrics_address=", kf.c_str(), pf.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  auto stop = [&] {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  };
  int port = 0;
  for (absl::Time end = absl::Now() + absl::Seconds(120); port == 0 && absl::Now() < end;) {
    std::ifstream in(port_file);
    if (!(in >> port)) absl::SleepFor(absl::Milliseconds(20));
  }
  if (port == 0) {
    stop();
    FAIL() << "zoomd did not start";
  }
  const std::string target = absl::StrCat("127.0.0.1:", port);
  client::ClientOptions admin;
  admin.api_key = kAdmin;
  ASSERT_OK(client::ZoomClient::Connect(target, admin)->ListCollections().status());
  // zoomctl with a key file.
  const std::string key_only = dir.File("key_only");
  WriteText(key_only, std::string(kAdmin) + "\n");
  EXPECT_EQ(RunShell(absl::StrCat(ZOOMCTL_BINARY, " --target ", target, " list")), 1);
  EXPECT_EQ(RunShell(absl::StrCat(ZOOMCTL_BINARY, " --target ", target, " --api_key_file ", key_only,
                             " list")),
            0);
  // The server's own key file works too (it sent "admin KEY" as the key).
  EXPECT_EQ(RunShell(absl::StrCat(ZOOMCTL_BINARY, " --target ", target, " --api_key_file ", keys,
                                  " list")),
            0);
  const std::string junk = dir.File("junk_keys");
  WriteText(junk, "admin a b c\n");
  EXPECT_EQ(RunShell(absl::StrCat(ZOOMCTL_BINARY, " --target ", target, " --api_key_file ", junk,
                                  " list")),
            2);
  // SIGHUP: the new key works (a bounded wait: the reload is asynchronous).
  const std::string fresh = "fresh-admin-key-0123456789";
  WriteText(keys, absl::StrCat("admin ", fresh, "\n"));
  kill(pid, SIGHUP);
  client::ClientOptions renewed;
  renewed.api_key = fresh;
  bool reloaded = false;
  for (absl::Time end = absl::Now() + absl::Seconds(60); !reloaded && absl::Now() < end;) {
    reloaded = client::ZoomClient::Connect(target, renewed)->ListCollections().ok();
    if (!reloaded) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(reloaded);
  EXPECT_THAT(client::ZoomClient::Connect(target, admin)->ListCollections().status(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  // SIGTERM still stops it cleanly.
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace zoom
