// Google Benchmark binary: the FMA peak, the matmul kernel, and full-window forward passes of the
// two benchmark shapes (s256, l768: bench/README.md) on the reference and the fast path, decode
// loops, training steps, and 2 threads against 1.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <time.h>
#include <unistd.h>

#include <filesystem>

#include "core/rng.hpp"
#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/gguf.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "core/thread_pool.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "lockstep/interop.hpp"
#include "lockstep/model.hpp"
#include "lockstep/session.hpp"
#include "lockstep/trainer.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"
#include "bench/simd_target.hpp"
#include "train/optimizer_pass.hpp"

#include <map>
#include <string>
#include <mutex>

namespace lockstep::bench {
double fma_chains(int64_t iterations, float* sink);
double fma_chains_avx2(int64_t iterations, float* sink);
uint32_t read_stream(const uint32_t* p, int64_t n);
}

namespace lockstep {
namespace {

ModelConfig shape_config(int which) {
  ModelConfig c;
  c.vocab_size = 256;
  c.length = 256;
  if (which == 2) {  // f128: the shipped fortunes model's shape (window 128)
    c.length = 128;
    c.d_model = 128;
    c.n_layers = 4;
    c.n_heads = 4;
    c.d_ff = 384;
  } else if (which == 0) {  // s256
    c.d_model = 256;
    c.n_layers = 6;
    c.n_heads = 8;
    c.d_ff = 768;
  } else {  // l768
    c.d_model = 768;
    c.n_layers = 12;
    c.n_heads = 12;
    c.d_ff = 2048;
  }
  c.n_kv_heads = c.n_heads;
  return c;
}

const char* shape_name(int which) { return which == 0 ? "s256" : which == 1 ? "l768" : "f128"; }

std::vector<float> random_vector(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(random_normal(seed, 0, static_cast<uint64_t>(i)));
  return v;
}

using bench::has_simd_target;

// FMA peak on `threads` threads at once (each thread its own chains), in the best target's
// vectors or (avx2) in AVX2's.
void fma_peak(benchmark::State& state, int threads, bool avx2) {
  ThreadPool pool(threads);
  const int64_t iterations = 2'000'000;
  double flops = 0;
  std::vector<float> sink(static_cast<size_t>(threads));
  std::vector<double> done(static_cast<size_t>(threads));
  for (auto _ : state) {
    pool.run(threads, [&](int w, int) {
      float* out = &sink[static_cast<size_t>(w)];
      done[static_cast<size_t>(w)] = avx2 ? bench::fma_chains_avx2(iterations, out) : bench::fma_chains(iterations, out);
    });
    benchmark::DoNotOptimize(sink.data());
    for (double f : done) flops += f;
  }
  state.counters["flops"] = benchmark::Counter(flops, benchmark::Counter::kIsRate);
}

void BM_FmaPeak(benchmark::State& state) { fma_peak(state, static_cast<int>(state.range(0)), false); }
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The AVX2 peak on one thread, beside which BM_TrainStepAvx2 is judged (issue 40 names AVX2).
void BM_FmaPeakAvx2(benchmark::State& state) {
  if (!has_simd_target("AVX2")) {
    state.SkipWithError("no AVX2 on this CPU or in this build");
    return;
  }
  fma_peak(state, 1, true);
}
BENCHMARK(BM_FmaPeakAvx2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The matmul kernel alone on one thread: [M, K] @ [K, N], or (transposed) the weight gradients'
// [K, M]^T @ [K, N] read in place, K being the 2048 rows of a training batch of s256.
void matmul_bench(benchmark::State& state, bool transposed) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  const simd::Kernels& k = simd::best_kernels();
  const auto a = random_vector(M * K, 1), w = random_vector(K * N, 2);
  const simd::PackedMatrix packed = simd::pack_matrix(k, w.data(), K, N, N);
  std::vector<float> c(static_cast<size_t>(M * N));
  std::vector<float> scratch(static_cast<size_t>(k.matmul_at_scratch_floats(M)));
  for (auto _ : state) {
    if (transposed) {
      k.matmul_at(a.data(), M, M, packed, 0, packed.panels, c.data(), N, scratch.data());
    } else {
      k.matmul(a.data(), K, M, packed, 0, packed.panels, c.data(), N);
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["flops"] = benchmark::Counter(2.0 * M * K * N, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Matmul(benchmark::State& state) { matmul_bench(state, false); }
void BM_MatmulAt(benchmark::State& state) { matmul_bench(state, true); }
BENCHMARK(BM_Matmul)->Args({16, 256, 768})->Args({16, 256, 1536})  // a decoding lane's 16 rows, B in L2
    ->Args({256, 768, 2304})->Args({256, 2048, 768})->Args({256, 256, 768})->Args({1, 768, 2304})
    ->Args({2048, 256, 768})->Args({2048, 768, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulAt)->Args({256, 2048, 768})->Args({768, 2048, 256})->Unit(benchmark::kMillisecond);

// One layer of causal attention as training runs it for s256: 8 rows of T = 256 positions, 8
// heads of head_dim 32; q, k and v in training's per-head rows ([row][head][T][head_dim]), dout
// and the gradients in its fused row layouts, so that each (row, head) reads from L3 as in a
// training step. Modes: 0, the forward as three queries at a time (attention_queries over
// keys in blocks of 16 positions, as inference's prefill runs it: the yardstick); 1, training's forward
// (attention_sequence); 2, the backward (attention_backward). flops: 2 per multiply-add over
// the t + 1 keys of each query, of two products forward (QK^T, PV) and five backward (QK^T
// again, dP = dO V^T, dQ, dK, dV).
void BM_Attention(benchmark::State& state) {
  const int64_t rows = 8, T = 256, heads = 8, mode = state.range(0);
  const int32_t hd = 32;
  const int64_t qd = heads * hd, R = rows * T, qkv_ld = 3 * qd;
  const simd::Kernels& k = simd::best_kernels();
  const auto q = random_vector(R * qd, 1), kk = random_vector(R * qd, 2), v = random_vector(R * qd, 3);
  const auto dout = random_vector(R * qd, 4);
  std::vector<float> kt(static_cast<size_t>(R * qd)), out(static_cast<size_t>(R * qd)),
      dqkv(static_cast<size_t>(R * qkv_ld));
  for (int64_t u = 0; u < rows * heads; ++u)  // kt [row][head][T / 16][hd][16]
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < hd; ++e)
        kt[static_cast<size_t>(u * hd * T + t / 16 * hd * 16 + e * 16 + t % 16)] = kk[static_cast<size_t>((u * T + t) * hd + e)];
  std::vector<float> scratch(static_cast<size_t>(std::max(
      {k.attention_backward_scratch(T, 1, hd), k.attention_sequence_scratch(T, hd), int64_t{3} * T})));
  const float scale = 0.17677669f;
  for (auto _ : state) {
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t u = b * heads + h;
        const float *qh = q.data() + u * T * hd, *kh = kk.data() + u * T * hd, *vh = v.data() + u * T * hd;
        float* o = out.data() + b * T * qd + h * hd;
        if (mode == 2) {
          float* dq = dqkv.data() + b * T * qkv_ld + h * hd;
          k.attention_backward(qh, hd, kh, vh, hd, dout.data() + b * T * qd + h * hd, qd, dq, qkv_ld, dq + qd,
                               dq + 2 * qd, qkv_ld, T, 1, hd, scale, scratch.data());
        } else if (mode == 1) {
          k.attention_sequence(qh, hd, kh, vh, hd, T, 1, hd, scale, o, qd, scratch.data());
        } else {
          for (int64_t t = 0; t < T; t += 3) {
            const int64_t keys[3] = {t + 1, t + 2, t + 3};
            const int count = static_cast<int>(std::min<int64_t>(3, T - t));
            k.attention_queries(qh + t * hd, hd, keys, count, kt.data() + u * hd * T, simd::key_block_stride(hd), vh, hd,
                                simd::key_block_stride(hd), hd, scale, o + t * qd, qd, scratch.data());
          }
        }
      }
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(dqkv.data());
  }
  const double products = static_cast<double>(rows * heads) * hd * T * (T + 1) / 2;  // multiply-adds of QK^T
  state.counters["flops"] =
      benchmark::Counter(2.0 * products * (mode == 2 ? 5 : 2), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// Initial weights per shape, made once per process (l768's take seconds to draw).
const std::vector<float>& shape_parameters(int which) {
  static std::mutex mutex;
  static std::map<int, std::vector<float>> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(which);
  if (it == cache.end()) it = cache.emplace(which, init_parameters(shape_config(which), 1)).first;
  return it->second;
}

// A full-window forward (one row of 256 tokens) of a shape: args {shape, threads}; threads 0 is
// the reference device.
void BM_Forward(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const ModelConfig c = shape_config(which);
  ModelOptions options;
  options.threads = threads > 0 ? threads : 1;
  const auto model = Model::from_parameters(c, shape_parameters(which), options);
  std::vector<int32_t> ids(static_cast<size_t>(c.length));
  for (int32_t t = 0; t < c.length; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>(random_below(256, 3, 0, static_cast<uint64_t>(t)));
  const CallOptions call{threads > 0 ? Device::cpu : Device::reference, threads > 0 ? threads : 1};
  RowRequest r;
  r.ids = ids;
  r.out_begin = 0;
  r.out_end = c.length;
  std::vector<float> logits(static_cast<size_t>(c.length) * c.vocab_size);
  r.logits = logits.data();
  for (auto _ : state) {
    model->forward({&r, 1}, call);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetLabel(shape_name(which));
  state.counters["tokens"] = benchmark::Counter(c.length, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Forward)->Args({0, 0})->Args({0, 1})->Args({0, 2})->Args({1, 1})->Args({1, 2})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

// A 200-token sampling loop in process: a session appending one greedy token at a time after a
// 16-byte prompt. Args {shape, threads}.
void BM_Decode(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const ModelConfig c = shape_config(which);
  ModelOptions options;
  options.threads = threads;
  const auto model = Model::from_parameters(c, shape_parameters(which), options);
  const std::vector<int32_t> prompt(16, 'a');
  for (auto _ : state) {
    Session session(model, {Device::cpu, threads});
    std::vector<float> logits = session.append(prompt);
    for (int i = 0; i < 200; ++i) {
      const int32_t next[] = {greedy_choice(logits)};
      logits = session.append(next);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetLabel(shape_name(which));
  state.counters["tokens"] = benchmark::Counter(200, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)->Args({0, 1})->Args({0, 2})->Args({1, 1})->Args({1, 2})->UseRealTime()->Unit(benchmark::kMillisecond);

// DRAM read bandwidth on `threads` threads: each reads its own 256 MiB once per iteration (far
// past the caches), so bytes of weights per token over this is the decode bound.
void BM_DramRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t words = int64_t{64} << 20;  // 256 MiB per thread
  std::vector<std::vector<uint32_t>> buffers(static_cast<size_t>(threads));
  ThreadPool pool(threads);
  pool.run(threads, [&](int w, int) { buffers[static_cast<size_t>(w)].assign(static_cast<size_t>(words), static_cast<uint32_t>(w + 1)); });
  std::vector<uint32_t> sink(static_cast<size_t>(threads));
  for (auto _ : state) {
    pool.run(threads, [&](int w, int) { sink[static_cast<size_t>(w)] = bench::read_stream(buffers[static_cast<size_t>(w)].data(), words); });
    benchmark::DoNotOptimize(sink.data());
  }
  state.counters["bytes"] = benchmark::Counter(static_cast<double>(words) * 4.0 * threads,
                                               benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DramRead)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// l768 stored as f32 (0), bf16 (1: precision bf16), q8 (2), q4 (3), or GGUF's Q8_0 (4) and Q4_0 (5)
// blocks under profile lockstep-int8dot-1 (integer dot products), the packed ones written once to a
// temporary directory and loaded (so they compute from their packed form); 6 and 7 are 4 and 5 on
// the AVX2 target (an AVX-512 machine's figure for an AVX2-only CPU's kernel; skipped where the
// CPU or build has no AVX2 target).
const char* packing_name(int packing) {
  const char* const names[] = {"f32", "bf16", "q8", "q4", "Q8_0 int8dot", "Q4_0 int8dot", "Q8_0 int8dot AVX2",
                               "Q4_0 int8dot AVX2"};
  return names[packing];
}

// One row of 32-value blocks as ggml's reference quantizer makes Q4_0: d = the value of largest
// magnitude / -8, q = clamp(x / d + 8.5, 0, 15) truncated, low nibbles elements 0-15.
void append_q4_0_row(std::span<const float> row, std::vector<uint8_t>& out) {
  for (size_t b = 0; b < row.size(); b += 32) {
    float amax = 0, max = 0;
    for (size_t j = 0; j < 32; ++j)
      if (std::fabs(row[b + j]) > amax) amax = std::fabs(row[b + j]), max = row[b + j];
    const float d = max / -8, id = d != 0 ? 1 / d : 0;
    const uint16_t h = format::f16_bits_from_f32(d);
    out.push_back(static_cast<uint8_t>(h & 0xff));
    out.push_back(static_cast<uint8_t>(h >> 8));
    for (size_t j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(row[b + j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(row[b + j + 16] * id + 8.5f));
      out.push_back(static_cast<uint8_t>(lo | (hi << 4)));
    }
  }
}

// l768's weights as a llama GGUF file with every matrix in `type` (Q8_0 or Q4_0), imported.
void write_l768_gguf(const std::string& file, const std::string& dir, format::GgmlType type) {
  const ModelConfig c = shape_config(1);
  const ParameterRegistry reg(c);
  const auto& p = shape_parameters(1);
  format::GgufWriter w(32);
  w.add_string("general.architecture", "llama");
  format::add_llama_config(w, c);
  // rows [N][K] of a lockstep matrix at `offset` ([K, N]; the embedding is rows already).
  auto matrix = [&](const std::string& name, int64_t offset, int64_t K, int64_t N, bool rows) {
    std::vector<float> row(static_cast<size_t>(K));
    std::vector<uint8_t> data;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < K; ++k) row[static_cast<size_t>(k)] = p[static_cast<size_t>(offset + (rows ? n * K + k : k * N + n))];
      if (type == format::GgmlType::q8_0) format::append_q8_0_row(row, data, name);
      else append_q4_0_row(row, data);
    }
    w.add_tensor(name, {static_cast<uint64_t>(K), static_cast<uint64_t>(N)}, type, std::move(data));
  };
  auto vector = [&](const std::string& name, int64_t offset) {
    std::vector<uint8_t> data(static_cast<size_t>(c.d_model) * 4);
    std::memcpy(data.data(), p.data() + offset, data.size());
    w.add_tensor(name, {static_cast<uint64_t>(c.d_model)}, format::GgmlType::f32, std::move(data));
  };
  matrix("token_embd.weight", reg.embed(), c.d_model, c.vocab_size, true);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const auto& L = reg.layer(l);
    const std::string b = "blk." + std::to_string(l) + ".";
    vector(b + "attn_norm.weight", L.attn_norm);
    matrix(b + "attn_q.weight", L.wq, c.d_model, c.q_dim(), false);
    matrix(b + "attn_k.weight", L.wk, c.d_model, c.kv_dim(), false);
    matrix(b + "attn_v.weight", L.wv, c.d_model, c.kv_dim(), false);
    matrix(b + "attn_output.weight", L.wo, c.q_dim(), c.d_model, false);
    vector(b + "ffn_norm.weight", L.mlp_norm);
    matrix(b + "ffn_gate.weight", L.w_gate, c.d_model, c.d_ff, false);
    matrix(b + "ffn_up.weight", L.w_up, c.d_model, c.d_ff, false);
    matrix(b + "ffn_down.weight", L.w_down, c.d_ff, c.d_model, false);
  }
  vector("output_norm.weight", reg.final_norm());
  matrix("output.weight", reg.head(), c.d_model, c.vocab_size, false);
  w.write(file);
  import_gguf(file, dir);
}

std::shared_ptr<const Model> packed_model(int packing, int threads) {
  std::string target;
  if (packing >= 6) {
    packing -= 2;
    target = "AVX2";
    if (!has_simd_target(target)) return nullptr;
  }
  const ModelConfig c = shape_config(1);
  const auto& params = shape_parameters(1);
  if (packing < 2) {
    ModelOptions options;
    options.threads = threads;
    if (packing == 1) options.precision = Precision::bf16;
    return Model::from_parameters(c, params, options);
  }
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("lockstep_bench_l768_" + std::to_string(packing) + "_" + std::to_string(::getpid())))
                              .string();
  if (packing >= 4 && !std::filesystem::exists(dir + "/model.json")) {
    write_l768_gguf(dir + ".gguf", dir, packing == 4 ? format::GgmlType::q8_0 : format::GgmlType::q4_0);
    std::filesystem::remove(dir + ".gguf");
  }
  if (!std::filesystem::exists(dir + "/model.json")) {
    std::filesystem::create_directories(dir);
    const std::string file = dir + "/" + format::kWeightsFile;
    const auto expanded = packing == 3 ? format::write_weights_q4(file, c, params) : format::write_weights_q8(file, c, params);
    format::ModelDescription d;
    d.config = c;
    d.profile = profile_name();
    d.weights = {format::kWeightsFile, packing_name(packing), sha256_f32_le(expanded)};
    format::write_file_synced(dir + "/model.json", format::render_model_json(d));
  }
  LoadOptions options;
  options.threads = threads;
  options.simd_target = target;
  auto model = Model::load(dir, options);
  std::filesystem::remove_all(dir);
  return model;
}

// Decode of l768 by storage: a 16-token prompt, then 64 tokens one at a time. Args {packing, threads}.
void BM_DecodePacked(benchmark::State& state) {
  const int packing = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = packed_model(packing, threads);
  if (!model) return state.SkipWithError("no AVX2 target here");
  const std::vector<int32_t> prompt(16, 'a');
  for (auto _ : state) {
    Session session(model, {Device::cpu, threads});
    std::vector<float> logits = session.append(prompt);
    for (int i = 0; i < 64; ++i) {
      const int32_t next[] = {greedy_choice(logits)};
      logits = session.append(next);
    }
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetLabel(std::string("l768 ") + packing_name(packing));
  state.counters["tokens"] = benchmark::Counter(64, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodePacked)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

// A prefill's one row: a full window of random ids (stream 3), the last position's logits out.
struct WindowRow {
  std::vector<int32_t> ids;
  mutable std::vector<float> logits;
  RowRequest request;
  explicit WindowRow(const ModelConfig& c)
      : ids(static_cast<size_t>(c.length)), logits(static_cast<size_t>(c.vocab_size)) {
    for (int32_t t = 0; t < c.length; ++t)
      ids[static_cast<size_t>(t)] = static_cast<int32_t>(random_below(256, 3, 0, static_cast<uint64_t>(t)));
    request.ids = ids;
    request.out_begin = c.length - 1;
    request.out_end = c.length;
    request.logits = logits.data();
  }
  WindowRow(const WindowRow&) = delete;
  WindowRow& operator=(const WindowRow&) = delete;
};

// Prefill of l768 by storage: one full 256-token window. Args {packing, threads}.
void BM_PrefillPacked(benchmark::State& state) {
  const int packing = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = packed_model(packing, threads);
  if (!model) return state.SkipWithError("no AVX2 target here");
  const ModelConfig c = shape_config(1);
  const WindowRow row(c);
  for (auto _ : state) {
    model->forward({&row.request, 1}, {Device::cpu, threads});
    benchmark::DoNotOptimize(row.logits.data());
  }
  state.SetLabel(std::string("l768 ") + packing_name(packing));
  state.counters["tokens"] = benchmark::Counter(c.length, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PrefillPacked)->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

// m1024: about 300 M parameters (d_model 1024, 24 layers, 16 heads, d_ff 2816, vocab 256, window
// 256; 1.23 GB of f32 weights), where decode reads far past any cache and the DRAM bound
// (BM_DramRead) dominates. Written once per process to a temporary directory (f32, q8, q4; bf16
// is the f32 file under precision bf16), removed at exit, and loaded one storage at a time.
ModelConfig m1024_config() {
  ModelConfig c;
  c.vocab_size = 256;
  c.length = 256;
  c.d_model = 1024;
  c.n_layers = 24;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.d_ff = 2816;
  return c;
}

struct M1024Files {
  std::string dir;
  M1024Files() {
    const ModelConfig c = m1024_config();
    dir = (std::filesystem::temp_directory_path() / ("lockstep_bench_m1024_" + std::to_string(::getpid()))).string();
    const std::vector<float> params = init_parameters(c, 1);
    for (const char* storage : {"f32", "q8", "q4"}) {
      const std::string sub = dir + "/" + storage;
      std::filesystem::create_directories(sub);
      const std::string file = sub + "/" + format::kWeightsFile;
      std::string sha;
      if (storage == std::string("f32")) {
        format::write_weights(file, c, params);
        sha = sha256_f32_le(params);
      }
      if (storage == std::string("q8")) sha = sha256_f32_le(format::write_weights_q8(file, c, params));
      if (storage == std::string("q4")) sha = sha256_f32_le(format::write_weights_q4(file, c, params));
      format::ModelDescription d;
      d.config = c;
      d.profile = profile_name();
      d.weights = {format::kWeightsFile, storage == std::string("f32") ? "float32" : storage, sha};
      format::write_file_synced(sub + "/model.json", format::render_model_json(d));
    }
  }
  ~M1024Files() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

// The m1024 model of a storage (0 f32, 1 bf16, 2 q8, 3 q4); one held at a time.
std::shared_ptr<const Model> m1024_model(int packing) {
  static M1024Files files;
  static int held = -1;
  static std::shared_ptr<const Model> model;
  if (held != packing) {
    model.reset();
    LoadOptions options;
    if (packing == 1) options.precision = Precision::bf16;
    model = Model::load(files.dir + "/" + (packing == 1 ? "f32" : packing_name(packing)), options);
    held = packing;
  }
  return model;
}

// CPU seconds of every thread of this process so far.
double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Decode of m1024 by storage: a 4-token prompt, then 8 tokens one at a time, only those timed
// (one iteration: a few seconds a point). Args {packing, threads}. Counters: tokens/s, the MB of
// weights each token reads (the decode bound is BM_DramRead's bytes/s over it) and the MB of
// weights the model holds.
void BM_DecodeM1024(benchmark::State& state) {
  const int packing = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = m1024_model(packing);
  const std::vector<int32_t> prompt(4, 'a');
  constexpr int kTokens = 8;
  double cpu_seconds = 0;
  for (auto _ : state) {
    Session session(model, {Device::cpu, threads});
    std::vector<float> logits = session.append(prompt);
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    for (int i = 0; i < kTokens; ++i) {
      const int32_t next[] = {greedy_choice(logits)};
      logits = session.append(next);
    }
    cpu_seconds += process_cpu_seconds() - cpu_start;
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    benchmark::DoNotOptimize(logits.data());
  }
  const PackedWeights& pw = *model->impl().packed;
  size_t bytes = pw.head.bytes();
  for (const auto& L : pw.layers) bytes += L.qkv.bytes() + L.wo.bytes() + L.gate_up.bytes() + L.w_down.bytes();
  state.SetLabel(std::string("m1024 ") + packing_name(packing));
  state.counters["tokens"] = benchmark::Counter(kTokens, benchmark::Counter::kIsIterationInvariantRate);
  // The timed tokens' CPU time (every thread of the process, so only one thread's is a speed):
  // the CPU column also holds the untimed prompt.
  state.counters["cpu_ms_per_token"] = cpu_seconds * 1e3 / (kTokens * static_cast<double>(state.iterations()));
  state.counters["weights_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["resident_MB"] = static_cast<double>(model->impl().resident_weight_bytes()) / 1e6;
}
BENCHMARK(BM_DecodeM1024)->ArgsProduct({{0, 1, 2, 3}, {1, 2}})->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// Prefill of m1024 by storage: one full 256-token window (one iteration a point). Args {packing,
// threads}. Counters: tokens/s by wall time and the CPU ms per token of every thread.
void BM_PrefillM1024(benchmark::State& state) {
  const int packing = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = m1024_model(packing);
  const ModelConfig c = m1024_config();
  const WindowRow row(c);
  double cpu_seconds = 0;
  for (auto _ : state) {
    const double cpu_start = process_cpu_seconds();
    model->forward({&row.request, 1}, {Device::cpu, threads});
    cpu_seconds += process_cpu_seconds() - cpu_start;
    benchmark::DoNotOptimize(row.logits.data());
  }
  state.SetLabel(std::string("m1024 ") + packing_name(packing));
  state.counters["tokens"] = benchmark::Counter(c.length, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["cpu_ms_per_token"] = cpu_seconds * 1e3 / (c.length * static_cast<double>(state.iterations()));
}
BENCHMARK(BM_PrefillM1024)->ArgsProduct({{0, 1, 2, 3}, {1, 2}})->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// Training steps (batch 8 x window 256, AdamW) of a shape on `threads` threads, in the SIMD
// target named (empty: the best this CPU runs).
void train_steps(benchmark::State& state, int which, int threads, const std::string& target) {
  ModelConfig c = shape_config(which);
  c.batch = 8;
  TrainerOptions options;
  options.threads = threads;
  options.simd_target = target;
  Trainer trainer(c, shape_parameters(which), options);
  std::vector<int32_t> ids(static_cast<size_t>(c.batch * (c.length + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(random_below(256, 4, 0, i));
  // One step before timing: the first allocates and first-touches the workspace, which a run
  // pays once, not per step.
  trainer.train_step({ids.data(), c.batch, c.length + 1});
  // Each step is also timed alone: a shared machine's neighbours only ever slow a step down, so
  // the fastest step shows what the code does when left alone (torch_train.py reports the same).
  std::vector<double> seconds;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    trainer.train_step({ids.data(), c.batch, c.length + 1});
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.SetLabel(shape_name(which) + (target.empty() ? "" : " " + target));
  const double tokens = static_cast<double>(c.batch * c.length);
  state.counters["tokens"] = benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  if (!seconds.empty()) state.counters["tokens_fastest_step"] = tokens / *std::min_element(seconds.begin(), seconds.end());
}

// Args {shape, threads}.
void BM_TrainStep(benchmark::State& state) {
  train_steps(state, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), "");
}
BENCHMARK(BM_TrainStep)->Args({0, 1})->Args({0, 2})->UseRealTime()->Unit(benchmark::kMillisecond);

// The same step of s256 on one thread in the library's AVX2 code, on a CPU with AVX-512 too: the
// share of BM_FmaPeakAvx2 it reaches stands in for an AVX2 CPU's (the same instructions; not the
// same caches or clocks).
void BM_TrainStepAvx2(benchmark::State& state) {
  if (!has_simd_target("AVX2")) {
    state.SkipWithError("no AVX2 on this CPU or in this build");
    return;
  }
  train_steps(state, 0, 1, "AVX2");
}
BENCHMARK(BM_TrainStepAvx2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The optimizer's pass over s256's parameters on one thread, as the trainer runs it with
// clipping and an EMA (train/optimizer_pass.hpp). Arg 0: ref's loops (the reference device);
// 1: the best SIMD target's twins.
void BM_OptimizerPass(benchmark::State& state) {
  const simd::Kernels* k = state.range(0) == 1 ? &simd::best_kernels() : nullptr;
  ThreadPool pool(1);
  const std::vector<float>& p = shape_parameters(0);
  const int64_t n = static_cast<int64_t>(p.size());
  const auto g = random_vector(n, 5);
  std::vector<float> m(p.size(), 1e-3f), v(p.size(), 1e-6f), ema = p, p_out(p.size()), m_out(p.size()),
      v_out(p.size()), ema_out(p.size());
  const train::OptimizerBuffers buffers{g.data(),     p.data(),     m.data(),     v.data(),      ema.data(),
                                        p_out.data(), m_out.data(), v_out.data(), ema_out.data()};
  const ref::AdamWScalars s = ref::adamw_scalars(3e-3f, 0.9f, 0.99f, 1e-8f, 0.05f, 10);
  for (auto _ : state) {
    const float scale = ref::clip_scale(train::gradient_sum_of_squares(k, pool, 1, g.data(), n), 1.0f);
    train::update_range(k, s, scale, 0.995, buffers, 0, n);
    benchmark::DoNotOptimize(ema_out.data());
  }
  state.counters["params"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_OptimizerPass)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// 2 threads against 1, inside one process: each iteration times the same work once on each
// (alternating which goes first), and the counters are the medians over iterations of each
// pair's ratio (2-thread speed / 1-thread speed) and of each side's tokens/s. Both sides of a
// pair see the same moments of the machine, so the ratio says how the pool copes with the
// machine's load (bench/run.sh busy runs it without and with a busy neighbour). Args {mode,
// shape}: mode 0 decode (a 16-token prompt, then 32 greedy tokens in a session, 12 for l768),
// 1 prefill (one full-window forward), 2 a training step (batch 2 x window, AdamW).
void BM_TwoThreadsVsOne(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const int which = static_cast<int>(state.range(1));
  const int decode_tokens = which == 1 ? 12 : 32;
  ModelConfig c = shape_config(which);
  c.batch = 2;
  const std::vector<float>& params = shape_parameters(which);
  std::vector<int32_t> ids(static_cast<size_t>(c.batch * (c.length + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(random_below(256, 5, 0, i));
  ModelOptions options;
  options.threads = 2;
  const auto model = Model::from_parameters(c, params, options);
  TrainerOptions train_options[2];
  std::unique_ptr<Trainer> trainers[2];
  if (mode == 2)
    for (int t = 0; t < 2; ++t) {
      train_options[t].threads = t + 1;
      trainers[t] = std::make_unique<Trainer>(c, params, train_options[t]);
    }
  std::vector<float> logits(static_cast<size_t>(c.length) * c.vocab_size);
  double tokens = 0;
  auto once = [&](int threads) {
    const auto start = std::chrono::steady_clock::now();
    if (mode == 0) {
      Session session(model, {Device::cpu, threads});
      std::vector<float> out = session.append({ids.data(), 16});
      for (int i = 0; i < decode_tokens; ++i) {
        const int32_t next[] = {greedy_choice(out)};
        out = session.append(next);
      }
      benchmark::DoNotOptimize(out.data());
      tokens = decode_tokens;
    } else if (mode == 1) {
      RowRequest r;
      r.ids = {ids.data(), static_cast<size_t>(c.length)};
      r.out_begin = 0;
      r.out_end = c.length;
      r.logits = logits.data();
      model->forward({&r, 1}, {Device::cpu, threads});
      tokens = c.length;
    } else {
      trainers[threads - 1]->train_step({ids.data(), c.batch, c.length + 1});
      tokens = static_cast<double>(c.batch) * c.length;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  once(1);  // warm-up: workspaces, first touch, the pool's threads
  once(2);
  std::vector<double> ratios, one, two;
  bool flip = false;
  for (auto _ : state) {
    double s1 = 0, s2 = 0;
    if (flip) {
      s2 = once(2);
      s1 = once(1);
    } else {
      s1 = once(1);
      s2 = once(2);
    }
    flip = !flip;
    ratios.push_back(s1 / s2);
    one.push_back(tokens / s1);
    two.push_back(tokens / s2);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  state.SetLabel(std::string(mode == 0 ? "decode " : mode == 1 ? "prefill " : "train ") + shape_name(which));
  state.counters["ratio_2t_1t"] = median(ratios);
  state.counters["ratio_min"] = ratios.empty() ? 0.0 : *std::min_element(ratios.begin(), ratios.end());
  state.counters["ratio_max"] = ratios.empty() ? 0.0 : *std::max_element(ratios.begin(), ratios.end());
  state.counters["tokens_1t"] = median(one);
  state.counters["tokens_2t"] = median(two);
}
BENCHMARK(BM_TwoThreadsVsOne)->Args({0, 2})->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1})->Args({2, 0})
    ->Iterations(9)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace lockstep

BENCHMARK_MAIN();
