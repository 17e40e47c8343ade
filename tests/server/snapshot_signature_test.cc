// Signed snapshots (storage/snapshot_archive.h, zoomd --snapshot_key_file):
// the signature entry's format (golden), the keys, what a reader with and
// without a key accepts, and the restores of a database and of the replay
// path refusing what its key did not sign.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/api/local_backend.h"
#include "server/api/snapshot_files.h"
#include "server/engine/database.h"
#include "storage/snapshot_archive.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_env.h"

namespace zoom {
namespace {

using ::testing::HasSubstr;
using ::zoom::testing::StatusIs;
using storage::ArchiveReader;
using storage::ArchiveWriter;
using storage::SnapshotKey;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

SnapshotKey Key(const std::string& secret) {
  absl::StatusOr<SnapshotKey> k = SnapshotKey::FromSecret(secret);
  EXPECT_OK(k.status());
  return k.ok() ? *k : SnapshotKey{};
}

// An archive of two entries at `path`, signed with `key` (null: unsigned);
// `tamper` changes the second entry's bytes.
void Write(const std::string& path, const SnapshotKey* key, bool tamper = false) {
  ASSERT_OK_AND_ASSIGN(auto w, ArchiveWriter::Create(path));
  w->SignWith(key);
  ASSERT_OK(w->Add("config", "dim=4\n"));
  ASSERT_OK(w->Add("vectors", tamper ? std::string(64, '\x7f') : std::string(64, '\x01')));
  ASSERT_OK(w->Finish());
}

// tests/data/golden/snapshot_signature_v1.txt is the signature entry of
// format 1 for the secret and digest below: the text must not change
// while the format stays, and the key id is derived as documented.
TEST(SnapshotSignatureTest, GoldenVersion1) {
  const SnapshotKey key = Key("zoomd-golden-signing-key-0001");
  storage::Sha256 h;
  h.Update("zoomd", 5);
  const std::string text = storage::SignatureText(key, h.Final());
  EXPECT_EQ(text, ReadAll(zoom::testing::TestDataPath("golden/snapshot_signature_v1.txt")));
  EXPECT_EQ(key.id.size(), 16u);
  EXPECT_EQ(text.substr(0, 41), "format=1\nalgorithm=hmac-sha256\nkey_id=" + key.id.substr(0, 3));
}

TEST(SnapshotSignatureTest, KeysComeFromFilesOfAtLeastSixteenBytes) {
  zoom::testing::TempDir dir;
  EXPECT_THAT(SnapshotKey::FromSecret("short").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 16")));
  WriteAll(dir.File("key"), "a-secret-of-some-length\n\n");
  ASSERT_OK_AND_ASSIGN(SnapshotKey from_file, SnapshotKey::ReadFile(dir.File("key")));
  EXPECT_EQ(from_file.id, Key("a-secret-of-some-length").id);  // trailing newlines dropped
  EXPECT_NE(from_file.id, Key("another-secret-of-some-length").id);
  WriteAll(dir.File("short"), "tiny\n");
  EXPECT_THAT(SnapshotKey::ReadFile(dir.File("short")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(dir.File("short"))));
  EXPECT_THAT(SnapshotKey::ReadFile(dir.File("absent")).status(),
              StatusIs(absl::StatusCode::kNotFound));
  std::filesystem::create_directories(dir.File("a-dir"));
  EXPECT_THAT(SnapshotKey::ReadFile(dir.File("a-dir")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  WriteAll(dir.File("huge"), std::string(5000, 'k'));
  EXPECT_THAT(SnapshotKey::ReadFile(dir.File("huge")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most")));
}

TEST(SnapshotSignatureTest, AReaderWithAKeyAcceptsOnlyWhatThatKeySigned) {
  zoom::testing::TempDir dir;
  const SnapshotKey key = Key("the-cluster-signing-key");
  const SnapshotKey other = Key("somebody-elses-signing-key");
  Write(dir.File("signed"), &key);
  Write(dir.File("unsigned"), nullptr);
  Write(dir.File("other"), &other);

  ASSERT_OK_AND_ASSIGN(auto signed_archive, ArchiveReader::Open(dir.File("signed")));
  EXPECT_TRUE(signed_archive->is_signed());
  EXPECT_EQ(signed_archive->signer_key_id(), key.id);
  EXPECT_EQ(signed_archive->entries().back().name, storage::kSignatureEntry);
  EXPECT_OK(signed_archive->CheckSignature(&key));
  EXPECT_OK(signed_archive->CheckSignature(nullptr));  // no key: not checked

  ASSERT_OK_AND_ASSIGN(auto unsigned_archive, ArchiveReader::Open(dir.File("unsigned")));
  EXPECT_FALSE(unsigned_archive->is_signed());
  EXPECT_OK(unsigned_archive->CheckSignature(nullptr));
  EXPECT_THAT(unsigned_archive->CheckSignature(&key),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("is not signed")));

  ASSERT_OK_AND_ASSIGN(auto other_archive, ArchiveReader::Open(dir.File("other")));
  EXPECT_THAT(other_archive->CheckSignature(&key),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr(absl::StrCat("signed with key ", other.id))));
}

// Whoever lacks the key can rebuild every SHA-256 of an altered archive
// (the entries' and the trailer's) and copy the old signature entry in:
// the digests all check, the signature does not.
TEST(SnapshotSignatureTest, AnAlteredArchiveWithFreshDigestsFailsItsSignature) {
  zoom::testing::TempDir dir;
  const SnapshotKey key = Key("the-cluster-signing-key");
  Write(dir.File("signed"), &key);
  ASSERT_OK_AND_ASSIGN(auto original, ArchiveReader::Open(dir.File("signed")));
  ASSERT_OK_AND_ASSIGN(std::string signature,
                       original->Read(storage::kSignatureEntry, 4096));
  {
    ASSERT_OK_AND_ASSIGN(auto w, ArchiveWriter::Create(dir.File("forged")));
    ASSERT_OK(w->Add("config", "dim=4\n"));
    ASSERT_OK(w->Add("vectors", std::string(64, '\x7f')));  // NaNs, say
    ASSERT_OK(w->Add(storage::kSignatureEntry, signature));
    ASSERT_OK(w->Finish());
  }
  ASSERT_OK_AND_ASSIGN(auto forged, ArchiveReader::Open(dir.File("forged")));  // digests fine
  EXPECT_EQ(forged->signer_key_id(), key.id);
  EXPECT_THAT(forged->CheckSignature(&key),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("does not match")));
  // A signature must close the entries.
  {
    ASSERT_OK_AND_ASSIGN(auto w, ArchiveWriter::Create(dir.File("after")));
    ASSERT_OK(w->Add(storage::kSignatureEntry, signature));
    ASSERT_OK(w->Add("vectors", std::string(64, '\x01')));
    ASSERT_OK(w->Finish());
  }
  EXPECT_THAT(ArchiveReader::Open(dir.File("after")).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("follows the signature")));
  {
    ASSERT_OK_AND_ASSIGN(auto w, ArchiveWriter::Create(dir.File("garbled")));
    ASSERT_OK(w->Add(storage::kSignatureEntry, "format=1\nalgorithm=md5\n"));
    ASSERT_OK(w->Finish());
  }
  EXPECT_THAT(ArchiveReader::Open(dir.File("garbled")).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("malformed")));
}

// A database with a key signs its snapshots and restores only signed ones,
// as a collection (RestoreSnapshot) and through the replay path (a
// cluster's archive); one without a key restores both kinds.
TEST(SnapshotSignatureTest, ADatabaseWithAKeySignsAndRestoresOnlySignedSnapshots) {
  zoom::testing::TempDir dir;
  auto open = [&](const std::string& name, std::shared_ptr<const SnapshotKey> key) {
    server::DatabaseOptions o;
    o.data_dir = dir.File(name);
    o.sync_always = false;
    o.collection.snapshot_key = std::move(key);
    absl::StatusOr<std::unique_ptr<server::Database>> db = server::Database::Open(o);
    EXPECT_OK(db.status());
    return db.ok() ? std::move(*db) : nullptr;
  };
  auto key = std::make_shared<const SnapshotKey>(Key("the-cluster-signing-key"));
  std::unique_ptr<server::Database> keyed = open("keyed", key), plain = open("plain", nullptr);
  ASSERT_TRUE(keyed && plain);
  auto snapshot = [](server::Database* db) -> std::string {
    server::api::LocalBackend backend(db, server::ServiceLimits{});
    server::api::CreateCollectionRequest req;
    req.config.name = "c";
    req.config.dim = 4;
    EXPECT_OK(backend.CreateCollection(server::api::Call{}, req).status());
    server::api::UpsertRequest up;
    up.collection = "c";
    for (int i = 0; i < 10; ++i) {
      server::api::NewPoint p;
      p.id = i;
      p.vector = {float(i), 1, 2, 3};
      up.points.push_back(p);
    }
    EXPECT_OK(backend.Upsert(server::api::Call{}, up).status());
    absl::StatusOr<server::SnapshotInfo> info = db->CreateSnapshot("c");
    EXPECT_OK(info.status());
    auto file = db->SnapshotFile("c", info->name);
    EXPECT_OK(file.status());
    return file->first;
  };
  const std::string signed_path = snapshot(keyed.get()), plain_path = snapshot(plain.get());
  ASSERT_OK_AND_ASSIGN(auto a, ArchiveReader::Open(signed_path));
  EXPECT_EQ(a->signer_key_id(), key->id);
  ASSERT_OK_AND_ASSIGN(auto b, ArchiveReader::Open(plain_path));
  EXPECT_FALSE(b->is_signed());

  EXPECT_OK(keyed->RestoreSnapshot(signed_path, "back", false).status());
  EXPECT_THAT(keyed->RestoreSnapshot(plain_path, "refused", false).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("is not signed")));
  EXPECT_FALSE(keyed->GetCollection("refused").ok());
  EXPECT_OK(plain->RestoreSnapshot(signed_path, "signed", false).status());
  EXPECT_OK(plain->RestoreSnapshot(plain_path, "unsigned", false).status());

  // The replay path (a cluster's archive, or any archive through a router)
  // checks the archive it is given with the same key.
  server::api::LocalBackend backend(keyed.get(), server::ServiceLimits{});
  server::DatabaseOptions scratch = keyed->options();
  scratch.data_dir = dir.File("scratch");
  EXPECT_THAT(server::api::RestoreByReplay(backend, scratch, server::api::Call{}, plain_path,
                                           "replayed", false, {})
                  .status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_OK(server::api::RestoreByReplay(backend, scratch, server::api::Call{}, signed_path,
                                         "replayed", false, {})
                .status());
}

}  // namespace
}  // namespace zoom
