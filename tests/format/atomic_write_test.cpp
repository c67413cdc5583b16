// Writers write under a temporary name and rename: a reader sees the old state or the new one,
// and a failed or abandoned write leaves nothing at the final path and no temporary behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "format/atomic_write.hpp"
#include "format/format_fixtures.hpp"
#include "lockstep/format.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using test::HasAll;
using test::list_directory;
using Names = std::vector<std::string>;

TEST(AtomicDirectory, UncommittedLeavesNothing) {
  test::TempDir tmp;
  {
    format::AtomicDirectory out(tmp / "model");
    EXPECT_EQ(format::parent_directory(out.temp_path()), tmp.path());
    EXPECT_TRUE(format::is_temporary_name(format::base_name(out.temp_path())));
    format::write_file_synced(out.file("a.txt"), "a");
    ASSERT_EQ(::mkdir(out.file("sub").c_str(), 0755), 0);
    format::write_file_synced(out.file("sub/b.txt"), "b");
    EXPECT_EQ(list_directory(tmp.path()).size(), 1u);  // the temporary
    EXPECT_FALSE(format::path_exists(tmp / "model"));
  }
  EXPECT_EQ(list_directory(tmp.path()), Names{});
}

TEST(AtomicDirectory, CommitRenamesIntoPlace) {
  test::TempDir tmp;
  {
    format::AtomicDirectory out(tmp / "model");
    format::write_file_synced(out.file("a.txt"), "hello");
    out.commit();
  }
  EXPECT_EQ(list_directory(tmp.path()), Names{"model"});
  EXPECT_EQ(test::read_file(tmp / "model/a.txt"), "hello");
}

TEST(AtomicDirectory, CommitRefusesAPathThatAppeared) {
  test::TempDir tmp;
  {
    format::AtomicDirectory out(tmp / "model");
    format::write_file_synced(out.file("a.txt"), "new");
    // Another writer got there first, with an empty directory (which rename() would replace).
    ASSERT_EQ(::mkdir((tmp / "model").c_str(), 0755), 0);
    try {
      out.commit();
      FAIL() << "committed over an existing directory";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::io);
      EXPECT_EQ(std::string(e.what()), (tmp / "model") + ": already exists");
    }
  }
  EXPECT_EQ(list_directory(tmp.path()), Names{"model"});
  EXPECT_EQ(list_directory(tmp / "model"), Names{});
}

TEST(AtomicFile, UncommittedLeavesNothingCommittedReplaces) {
  test::TempDir tmp;
  test::write_file(tmp / "f", "old");
  {
    format::AtomicFile f(tmp / "f");
    f.write("new, abandoned");
  }
  EXPECT_EQ(list_directory(tmp.path()), Names{"f"});
  EXPECT_EQ(test::read_file(tmp / "f"), "old");
  format::write_file_atomic(tmp / "f", "new");
  EXPECT_EQ(list_directory(tmp.path()), Names{"f"});
  EXPECT_EQ(test::read_file(tmp / "f"), "new");
}

TEST(FileWriter, RefusesAnExistingFile) {
  test::TempDir tmp;
  test::write_file(tmp / "f", "old");
  try {
    format::FileWriter w(tmp / "f");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_TRUE(HasAll(e.what(), {tmp / "f", "cannot create", "File exists"}));
  }
  EXPECT_EQ(test::read_file(tmp / "f"), "old");
}

TEST(TemporaryNames, AreRecognised) {
  EXPECT_TRUE(format::is_temporary_name(".step-00000200.tmp-Ab12Cd"));
  EXPECT_TRUE(format::is_temporary_name(".model.json.tmp-000000"));
  EXPECT_FALSE(format::is_temporary_name("step-00000200"));
  EXPECT_FALSE(format::is_temporary_name(".hidden"));
  EXPECT_FALSE(format::is_temporary_name("x.tmp-000000"));
  EXPECT_EQ(format::parent_directory("/a/b/c/"), "/a/b");
  EXPECT_EQ(format::parent_directory("c"), ".");
  EXPECT_EQ(format::parent_directory("/c"), "/");
  EXPECT_EQ(format::base_name("/a/b/c//"), "c");
}

TEST(WriteModelDirectory, RefusesAnExistingDirectoryAndLeavesItAlone) {
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  test::write_file(dir + "/mine.txt", "keep me");
  const ModelConfig config = test::tiny_config();
  try {
    write_model_directory(dir, config, init_parameters(config, 1), {});
    FAIL() << "wrote over an existing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_EQ(std::string(e.what()), "'" + dir + "' already exists; lockstep will not overwrite it");
  }
  EXPECT_EQ(list_directory(tmp.path()), Names{"model"});
  EXPECT_EQ(list_directory(dir), Names{"mine.txt"});
  EXPECT_EQ(test::read_file(dir + "/mine.txt"), "keep me");
}

TEST(WriteModelDirectory, RefusesWrongParameterCountLeavingNothing) {
  test::TempDir tmp;
  const std::vector<float> params(10, 0.0f);
  EXPECT_THROW(write_model_directory(tmp / "model", test::tiny_config(), params, {}), Error);
  EXPECT_EQ(list_directory(tmp.path()), Names{});
}

// A write that fails part-way (the file size limit hit inside params.safetensors) leaves no
// directory at the final path and no temporary beside it. The limit is set in a forked child so
// that it does not touch the test process; SIGXFSZ is ignored so that write() fails with EFBIG
// instead of killing the child. The child reports through its exit status:
//   0 refused with an io error naming the weights file, 1 wrote the directory anyway,
//   2 refused with another error, 3 some other exception.
TEST(WriteModelDirectory, FailedWriteLeavesNoHalfDirectory) {
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  const ModelConfig config = test::tiny_config();
  const std::vector<float> params = init_parameters(config, 1);
  const std::string message_file = tmp.path() + "-message";

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{16384, 16384};  // bytes: well inside the ~56 KiB weights file
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int status = 1;
    try {
      write_model_directory(dir, config, params, {});
    } catch (const Error& e) {
      const std::string m = e.what();
      status = e.kind() == ErrorKind::io && m.find("params.safetensors: cannot write: File too large") !=
                                                std::string::npos
                   ? 0
                   : 2;
      if (FILE* f = std::fopen(message_file.c_str(), "w")) {
        std::fputs(m.c_str(), f);
        std::fclose(f);
      }
    } catch (...) {
      status = 3;
    }
    ::_exit(status);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string message = test::read_file(message_file);
  ::unlink(message_file.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << "child died: " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child's error: " << message;
  EXPECT_FALSE(format::path_exists(dir));
  EXPECT_EQ(list_directory(tmp.path()), Names{});

  // The same call without the limit succeeds: the failure was the limit's.
  write_model_directory(dir, config, params, {});
  EXPECT_EQ(list_directory(dir), (Names{"model.json", "params.safetensors"}));
}

}  // namespace
}  // namespace lockstep
