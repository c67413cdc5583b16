// Run files: every key read into the RunSpec, the defaults, and every kind of refusal with its
// file, line and column; the examples in examples/ parse.
#include "train/run_file.hpp"

#include <dirent.h>
#include <gtest/gtest.h>

#include "lockstep/error.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kFile = "dir/run.sx";

// The message of the refusal of `text`, which must be a format error.
std::string refusal(const std::string& text) {
  try {
    parse_run_file(text, kFile);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

void expect_refusal(const std::string& text, const std::string& where, const std::string& says) {
  const std::string message = refusal(text);
  EXPECT_EQ(message.rfind(kFile + ":" + where + ": ", 0), 0u) << "expected at " << where << ": " << message;
  EXPECT_NE(message.find(says), std::string::npos) << "expected '" << says << "' in: " << message;
}

TEST(RunFile, ReadsEveryKey) {
  const std::string text =
      "; comment\n"
      "(defrun my-run.v2 ; the slug\n"
      "  :vocab-size 200 :length 32 :d-model 48 :n-layers 3 :n-heads 6 :n-kv-heads 2 :d-ff 100\n"
      "  :norm-eps 1e-6 :rope-theta 500000.0\n"
      "  :data (\"a.txt\" \"dir/b \\\"q\\\".txt\") :held-out 0.125\n"
      "  :steps 1000 :batch 4 :seed 18446744073709551615\n"
      "  :lr 5e-4 :lr-min 1e-5 :warmup 100 :schedule constant\n"
      "  :weight-decay 0.1 :beta1 0.8 :beta2 0.95 :eps 1e-6 :clip 0.5\n"
      "  :ema 0.999 :precision bf16\n"
      "  :checkpoint-every 250 :keep 3 :eval-every 50 :eval-batches 7\n"
      "  :load ((embed \"e.safetensors\") (\"head\" \"h.safetensors\" \"out.weight\")))\n";
  const RunSpec s = parse_run_file(text, kFile);
  EXPECT_EQ(s.slug, "my-run.v2");
  EXPECT_EQ(s.path, kFile);
  EXPECT_EQ(s.text, text);
  EXPECT_EQ(s.model.vocab_size, 200);
  EXPECT_EQ(s.model.length, 32);
  EXPECT_EQ(s.model.d_model, 48);
  EXPECT_EQ(s.model.n_layers, 3);
  EXPECT_EQ(s.model.n_heads, 6);
  EXPECT_EQ(s.model.n_kv_heads, 2);
  EXPECT_EQ(s.model.d_ff, 100);
  EXPECT_EQ(s.model.norm_eps, 1e-6f);
  EXPECT_EQ(s.model.rope_theta, 500000.0f);
  EXPECT_EQ(s.model.batch, 4);
  EXPECT_EQ(s.data, (std::vector<std::string>{"a.txt", "dir/b \"q\".txt"}));
  EXPECT_EQ(s.held_out_ppm, 125000);
  EXPECT_EQ(s.steps, 1000);
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_EQ(s.lr, 5e-4f);
  EXPECT_EQ(s.lr_min, 1e-5f);
  EXPECT_EQ(s.warmup, 100);
  EXPECT_EQ(s.schedule, LrSchedule::constant);
  EXPECT_EQ(s.adamw.weight_decay, 0.1f);
  EXPECT_EQ(s.adamw.beta1, 0.8f);
  EXPECT_EQ(s.adamw.beta2, 0.95f);
  EXPECT_EQ(s.adamw.eps, 1e-6f);
  EXPECT_EQ(s.adamw.clip_norm, 0.5f);
  EXPECT_EQ(s.adamw.lr, 5e-4f);
  EXPECT_EQ(s.ema, 0.999f);
  EXPECT_EQ(s.precision, Precision::bf16);
  EXPECT_EQ(s.checkpoint_every, 250);
  EXPECT_EQ(s.keep, 3);
  EXPECT_EQ(s.eval_every, 50);
  EXPECT_EQ(s.eval_batches, 7);
  ASSERT_EQ(s.load.size(), 2u);
  EXPECT_EQ(s.load[0].parameter, "embed");
  EXPECT_EQ(s.load[0].file, "e.safetensors");
  EXPECT_EQ(s.load[0].tensor, "embed");
  EXPECT_EQ(s.load[1].parameter, "head");
  EXPECT_EQ(s.load[1].tensor, "out.weight");
}

TEST(RunFile, DefaultsMakeASmallRun) {
  const RunSpec s = parse_run_file("(defrun small :data \"x\")", kFile);
  EXPECT_EQ(s.model.vocab_size, 256);
  EXPECT_EQ(s.model.length, 64);
  EXPECT_EQ(s.model.d_model, 64);
  EXPECT_EQ(s.model.n_layers, 2);
  EXPECT_EQ(s.model.n_heads, 4);
  EXPECT_EQ(s.model.n_kv_heads, 4);
  EXPECT_EQ(s.model.d_ff, 192);
  EXPECT_EQ(s.model.norm_eps, 1e-5f);
  EXPECT_EQ(s.model.rope_theta, 10000.0f);
  EXPECT_EQ(s.model.batch, 8);
  EXPECT_EQ(s.held_out_ppm, 100000);
  EXPECT_EQ(s.steps, 200);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.lr, 2e-3f);
  EXPECT_EQ(s.lr_min, static_cast<float>(static_cast<double>(2e-3f) / 10.0));  // :lr / 10
  EXPECT_EQ(s.warmup, 20);
  EXPECT_EQ(s.schedule, LrSchedule::cosine);
  EXPECT_EQ(s.adamw.weight_decay, 0.01f);
  EXPECT_EQ(s.adamw.beta1, 0.9f);
  EXPECT_EQ(s.adamw.beta2, 0.99f);
  EXPECT_EQ(s.adamw.eps, 1e-8f);
  EXPECT_EQ(s.adamw.clip_norm, 1.0f);
  EXPECT_EQ(s.ema, 0.0f);
  EXPECT_EQ(s.precision, Precision::f32);
  EXPECT_EQ(s.checkpoint_every, 100);
  EXPECT_EQ(s.keep, 0);
  EXPECT_EQ(s.eval_every, 50);
  EXPECT_EQ(s.eval_batches, 4);
  EXPECT_TRUE(s.load.empty());
  // Defaults that follow other keys.
  const RunSpec t = parse_run_file("(defrun small :data \"x\" :d-model 32 :n-heads 2 :lr 1e-2)", kFile);
  EXPECT_EQ(t.model.d_ff, 96);
  EXPECT_EQ(t.model.n_kv_heads, 2);
  EXPECT_EQ(t.lr_min, static_cast<float>(static_cast<double>(1e-2f) / 10.0));
}

TEST(RunFile, AnUnknownKeyListsTheValidKeys) {
  const std::string message = refusal("(defrun r :data \"x\"\n   :lenght 12)");
  EXPECT_EQ(
      message.rfind(kFile + ":2:4: :lenght is not a defrun key (did you mean :length?); valid keys:", 0), 0u)
      << message;
  for (const std::string& key : run_file_keys()) EXPECT_NE(message.find(" " + key), std::string::npos) << key;
  EXPECT_EQ(run_file_keys().size(), 30u);
  expect_refusal("(defrun r :data \"x\" :zzzzzzzz 1)", "1:21",
                 ":zzzzzzzz is not a defrun key; valid keys: :batch");
}

TEST(RunFile, RefusesBadValuesWhereTheyAre) {
  const std::string head = "(defrun r :data \"x\"\n  ";
  struct Case {
    std::string keys, where, says;
  };
  const std::vector<Case> cases = {
      {":steps 1.5", "2:10", ":steps must be an integer in [1, 1000000000], got 1.5"},
      {":steps 0", "2:10", ":steps must be an integer in [1, 1000000000], got 0"},
      {":steps 99999999999999999999", "2:10", ":steps must be an integer"},
      {":steps \"10\"", "2:10", "got the string \"10\""},
      {":batch (1)", "2:10", ":batch must be an integer in [1, 65536], got a list"},
      {":lr -1", "2:7", ":lr must be a positive number, got -1"},
      {":lr 0", "2:7", ":lr must be a positive number"},
      {":lr 1e999", "2:7", ":lr must be a positive number, got 1e999"},
      {":lr fast", "2:7", "got the symbol fast"},
      {":beta1 1", "2:10", ":beta1 must be a number in [0, 1)"},
      {":beta2 -0.1", "2:10", ":beta2 must be a number in [0, 1)"},
      {":eps 0", "2:8", ":eps must be a positive number"},
      {":clip -1", "2:9", ":clip must be a number >= 0 (0: no clipping)"},
      {":weight-decay -0.5", "2:17", ":weight-decay must be a number >= 0"},
      {":ema 1", "2:8", ":ema must be a decay in [0, 1) (0: no EMA)"},
      {":precision f16", "2:14", ":precision must be one of f32 bf16, got the symbol f16"},
      {":schedule linear", "2:13", ":schedule must be one of cosine constant"},
      {":held-out 0.1234567", "2:13", ":held-out must be a decimal in [0, 1) with at most 6 places"},
      {":held-out 1", "2:13", ":held-out must be a decimal in [0, 1)"},
      {":held-out 1e-1", "2:13", ":held-out must be a decimal"},
      {":seed -1", "2:9", ":seed must be an integer in [0, 18446744073709551615]"},
      {":warmup -1", "2:11", ":warmup must be an integer in [0, 1000000000]"},
      {":checkpoint-every -1", "2:21", ":checkpoint-every must be an integer"},
      {":keep 1.0", "2:9", ":keep must be an integer"},
      {":eval-every x", "2:15", ":eval-every must be an integer"},
      {":eval-batches 0", "2:17", ":eval-batches must be an integer in [1, 100000]"},
      {":length 0", "2:11", ":length must be an integer in [1, 65536]"},
      {":d-model 1", "2:12", ":d-model must be an integer in [2, 65536]"},
      {":vocab-size 2000000", "2:15", ":vocab-size must be an integer in [1, 1048576]"},
      {":norm-eps 0", "2:13", ":norm-eps must be a positive number"},
      {":rope-theta 1", "2:15", ":rope-theta must be a number > 1"},
      {":n-heads 3", "2:3", ":n-heads 3 must divide :d-model 64"},
      {":d-model 12 :n-heads 4", "2:15", "the head width :d-model / :n-heads = 3 must be even"},
      {":n-kv-heads 3", "2:3", ":n-kv-heads 3 must divide :n-heads 4"},
      {":lr 1e-3 :lr-min 1e-2", "2:12", ":lr-min must not exceed :lr"},
      {":load (embed \"x\")", "2:10",
       ":load must be a list of (PARAMETER \"file.safetensors\") lists, got the symbol embed"},
      {":load ((embed))", "2:10",
       ":load must be a list of (PARAMETER \"file.safetensors\") lists, got a list"},
      {":load ((embed 5))", "2:17", "got 5"},
      {":load ((embed \"\"))", "2:17", ":load names an empty path"},
      {":load ((embed \"a\" \"\"))", "2:21", "the tensor name a non-empty string"},
      {":load ((7 \"a\"))", "2:11", "whose PARAMETER is a registry name"},
      {":load ((wq \"a\"))", "2:3", ":load names 'wq', which is not a parameter of this model"},
      {":load ((embed \"a\") (embed \"b\"))", "2:3", ":load names 'embed' twice"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.keys);
    expect_refusal(head + c.keys + ")", c.where, c.says);
  }
  expect_refusal("(defrun r :data 5)", "1:17",
                 ":data must be a file name in a string, or a list of them, got 5");
  expect_refusal("(defrun r :data ())", "1:17",
                 ":data must be a file name in a string, or a list of them, got a list");
  expect_refusal("(defrun r :data (\"a\" b))", "1:22", "got the symbol b");
  expect_refusal("(defrun r :data \"\")", "1:17", ":data names an empty path");
}

TEST(RunFile, RefusesBadStructureWhereItIs) {
  expect_refusal("", "1:1", "holds no (defrun NAME :key value ...) form");
  expect_refusal("; only a comment\n", "1:1", "holds no (defrun");
  expect_refusal("(defrun r :data \"x\")\n(defrun s)", "2:1", "this is a second");
  expect_refusal("(run r :data \"x\")", "1:1", "holds a (defrun NAME :key value ...) form");
  expect_refusal("defrun", "1:1", "holds a (defrun NAME");
  expect_refusal("()", "1:1", "holds a (defrun NAME");
  expect_refusal("(defrun)", "1:1", "(defrun) needs a NAME");
  expect_refusal("(defrun \"r\" :data \"x\")", "1:9", "the run's NAME must be a symbol");
  expect_refusal("(defrun -r :data \"x\")", "1:9", "the run's NAME must be a symbol");
  expect_refusal("(defrun r/s :data \"x\")", "1:9", "the run's NAME must be a symbol");
  expect_refusal("(defrun r :data \"x\" steps 3)", "1:21", "expected a :key, got the symbol steps");
  expect_refusal("(defrun r :data \"x\" :steps)", "1:21", ":steps has no value");
  expect_refusal("(defrun r :data \"x\" :steps :batch 2)", "1:28", ":steps has no value before :batch");
  expect_refusal("(defrun r :data \"x\"\n :steps 3\n :steps 4)", "3:2",
                 ":steps is given twice (first at line 2, column 2)");
  expect_refusal("(defrun r)", "1:2", "the run names no :data");
  // The reader.
  expect_refusal("(defrun r :data \"x\"", "1:1", "this '(' is never closed");
  expect_refusal("(defrun r :data \"x\"))", "1:21", "this ')' closes no list");
  expect_refusal("(defrun r :data \"x)", "1:17", "this string is never closed");
  expect_refusal("(defrun r :data \"a\\qb\")", "1:19", "unknown escape '\\q'");
  expect_refusal("(defrun r :steps 1.2.3 :data \"x\")", "1:18", "malformed number '1.2.3'");
  expect_refusal("(defrun r :steps 12abc :data \"x\")", "1:18", "malformed number '12abc'");
  expect_refusal("(defrun r : 3)", "1:11", "':' alone is not a keyword");
  expect_refusal("(defrun r\n\t:data \"x\" \x01)", "2:12", "unexpected control character 0x01");
  expect_refusal(std::string("(defrun r :data \"x\0y\")", 22), "1:19", "unexpected control character 0x00");
  expect_refusal("(defrun r :data \"x\" :steps \xc3\xa9)", "1:28", "unexpected byte 0xc3 outside a string");
  expect_refusal(std::string(40, '(') + std::string(40, ')'), "1:33", "lists nest more than 32 deep");
  expect_refusal(std::string(2 << 20, ' '), "1:1", "more than the 1048576 a run file may");
  // Strings may hold any UTF-8, and newlines move the line count.
  const RunSpec s = parse_run_file("(defrun r :data \"caf\xc3\xa9\nline2\" :steps 3)", kFile);
  EXPECT_EQ(s.data[0], "caf\xc3\xa9\nline2");
  expect_refusal("(defrun r :data \"a\nb\" :steps 0)", "2:11", ":steps must be");
}

TEST(RunFile, ReadRunFileNamesAMissingFile) {
  test::TempDir dir;
  try {
    read_run_file(dir / "none.sx");
    FAIL() << "accepted a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find(dir / "none.sx"), std::string::npos) << e.what();
  }
  test::write_file(dir / "r.sx", "(defrun r :data \"x\" :steps 0)");
  try {
    read_run_file(dir / "r.sx");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir / "r.sx" + ":1:28: ", 0), 0u) << e.what();
  }
}

TEST(RunFile, TheExamplesParse) {
  const std::string examples = std::string(LOCKSTEP_SOURCE_DIR) + "/examples";
  DIR* d = ::opendir(examples.c_str());
  ASSERT_NE(d, nullptr);
  int parsed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 3 || name.substr(name.size() - 3) != ".sx") continue;
    SCOPED_TRACE(name);
    const RunSpec s = read_run_file(examples + "/" + name);
    EXPECT_EQ(s.slug + ".sx", name);
    ++parsed;
  }
  ::closedir(d);
  EXPECT_GE(parsed, 2);
}

TEST(RunFile, ReaderKeepsPositions) {
  const auto forms = train::read_sexps("  (a :b\n  \"c\" 1.5e3)", "f");
  ASSERT_EQ(forms.size(), 1u);
  const auto& items = forms[0].items;
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(forms[0].pos.line, 1);
  EXPECT_EQ(forms[0].pos.column, 3);
  EXPECT_EQ(items[1].kind, train::Sexp::Kind::keyword);
  EXPECT_EQ(items[1].text, "b");
  EXPECT_EQ(items[2].kind, train::Sexp::Kind::string);
  EXPECT_EQ(items[2].pos.line, 2);
  EXPECT_EQ(items[2].pos.column, 3);
  EXPECT_EQ(items[3].kind, train::Sexp::Kind::number);
  EXPECT_EQ(items[3].text, "1.5e3");
  EXPECT_EQ(items[3].pos.column, 7);
}

}  // namespace
}  // namespace lockstep
