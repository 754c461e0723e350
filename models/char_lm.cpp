// The char-LM job on the generic trainer: data source, vocabulary metadata, sampling.
#include "models/char_lm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>

#include "io/message.h"
#include "train/data.h"
#include "train/data_path.h"

namespace gg::models {

using train::InputError;

const train::OptionTable<CharLmOptions>& CharLmOptions::table() {
  using O = CharLmOptions;
  using train::opt;
  static const train::OptionTable<O> t{
      {opt("data", &O::data, "Text file to train on (default: the bundled tinyshakespeare.txt)").reads_file(),
       opt("batch_size", &O::batch_size, "Sequences per step").at_least(1).at_most(1 << 20),
       opt("sample_tokens", &O::sample_tokens, "Characters to generate at the end").at_least(0).at_most(1 << 20),
       opt("temperature", &O::temperature, "Sampling temperature").above(0).at_most(100),
       opt("top_k", &O::top_k, "Sample among the k likeliest (0 = all)").at_least(0).at_most(1 << 24)}};
  return t;
}

const train::OptionTable<SampleOptions>& SampleOptions::table() {
  using O = SampleOptions;
  using train::opt;
  static const train::OptionTable<O> t{
      {opt("prompt", &O::prompt, "Text to continue"),
       opt("temperature", &O::temperature, "Sampling temperature").above(0).at_most(100),
       opt("top_k", &O::top_k, "Sample among the k likeliest (0 = all)").at_least(0).at_most(1 << 24),
       opt("tokens", &O::tokens, "Characters to generate").at_least(0).at_most(1 << 24),
       opt("seed", &O::seed, "Random seed (sample i of --samples draws with seed + i)")}};
  return t;
}

train::TrainOptions char_lm_train_defaults() {
  train::TrainOptions t;
  t.out_dir = "runs/shakespeare";
  t.steps = 2000;
  t.warmup = 100;
  t.lr = 1e-3;
  t.min_lr = 1e-4;
  t.beta2 = 0.99;
  t.weight_decay = 0.1;
  t.clip = 1.0;
  t.eval_interval = 250;
  t.eval_iters = 20;
  t.final_eval_iters = 200;
  return t;
}

std::string default_text_path() { return train::find_data_file("tinyshakespeare.txt"); }

namespace {
std::string vocab_json(const std::string& vocab) {
  std::string s = "[";
  for (unsigned char ch : vocab) s += fmt::format("{}{}", s.size() > 1 ? "," : "", int(ch));
  return s + "]";
}
std::string vocab_from_json(const std::string& text, const std::string& path) {
  std::string v;
  auto bad = [&] { return InputError(fmt::format("{}: the vocabulary metadata is damaged", path)); };
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') throw bad();
  std::size_t i = 1;
  while (i < text.size() - 1) {
    int x = 0, digits = 0;
    while (i < text.size() - 1 && std::isdigit(static_cast<unsigned char>(text[i])) && digits < 4)
      x = x * 10 + (text[i++] - '0'), ++digits;
    if (digits == 0 || x > 255) throw bad();
    v.push_back(char(x));
    if (i < text.size() - 1 && text[i++] != ',') throw bad();
  }
  return v;
}
}  // namespace

train::DataSource char_windows(const train::CharData& text, std::int64_t B, std::int64_t T, std::uint64_t val_seed) {
  auto batch = [&text, B, T](const std::vector<std::int32_t>& split, std::mt19937_64& rng) {
    std::vector<std::int32_t> x, y;  // x, y: (B, T)
    train::sample_batch(split, B, T, rng, x, y);
    return train::Batch{{"tokens", Tensor::i32({B, T}, x)}, {"targets", Tensor::i32({B, T}, y)}};
  };
  struct Val {
    std::mt19937_64 rng;
    std::vector<train::Batch> batches;
  };
  auto val = std::make_shared<Val>(Val{std::mt19937_64(val_seed), {}});
  train::DataSource d;
  d.train = [&text, batch](std::mt19937_64& rng) { return batch(text.train, rng); };
  d.val = [&text, batch, val](std::int64_t i) {
    while (std::int64_t(val->batches.size()) <= i) val->batches.push_back(batch(text.val, val->rng));
    return val->batches[std::size_t(i)];
  };
  d.items = [](const train::Batch& b) { return numel(b.at("tokens").shape()); };
  d.item_name = "tok";
  return d;
}

CharLmResult run_char_lm(const CharLmOptions& opts, GptConfig model, const train::TrainOptions& t, std::FILE* out) {
  CharLmOptions o = opts;
  CharLmOptions::table().validate(&o, "options");
  const std::string path = o.data.empty() ? default_text_path() : o.data;
  train::CharData data = train::CharData::load(path, model.block_size);
  model.vocab_size = std::int64_t(data.vocab.size());
  train::Model m = gpt_model(model);
  const std::int64_t B = o.batch_size, T = model.block_size;

  train::DataSource src = char_windows(data, B, T, std::uint64_t(t.seed) + 1);

  fmt::print(out, "gradgraph train: {} ({} chars, vocab {}), {} layers x {} heads x {} dims, block {}, batch {}\n", path,
             data.size, data.vocab.size(), model.n_layer, model.n_head, model.n_embd, model.block_size, B);
  train::RunInfo info;
  info.title = fmt::format("gradgraph char transformer on {}", std::filesystem::path(path).filename().string());
  info.metadata["vocab"] = vocab_json(data.vocab);
  info.metadata["job"] = "char_lm";
  {
    train::Checkpoint probe;  // a resumed run must see the same vocabulary
    const std::string ck_path = t.out_dir + "/checkpoint.safetensors";
    if (t.resume && std::filesystem::exists(ck_path)) {
      probe = train::load_checkpoint(ck_path);
      if (probe.user["vocab"] != info.metadata["vocab"])
        throw InputError(fmt::format("{}: the checkpoint's vocabulary differs from that of {}", io::cut(ck_path, 80),
                                     io::cut(path, 80)));
    }
  }
  CharLmResult r;
  r.fit = train::fit(m, src, t, info, out);
  if (o.sample_tokens > 0) {
    SampleOptions so;
    so.tokens = o.sample_tokens;
    so.temperature = o.temperature;
    so.top_k = o.top_k;
    so.seed = std::uint64_t(t.seed);
    r.sample = sample_text(model, m.params(), data.vocab, so);
    fmt::print(out, "--- sample ---\n{}\n--------------\n", r.sample);
    std::fflush(out);
  }
  return r;
}

CharLmCheckpoint load_char_lm(const std::string& path) {
  train::Checkpoint ck = train::load_checkpoint(path);
  if (ck.model_kind != "gpt" || !ck.user.count("vocab"))
    throw InputError(fmt::format("{}: not a character-model checkpoint (model {}, {})", io::cut(path, 80),
                                 io::in_quotes(ck.model_kind, 40),
                                 ck.user.count("vocab") ? "with a vocabulary" : "no vocabulary"));
  CharLmCheckpoint c;
  c.config = parse_gpt_config(ck.model_options, path + " (model_options)");
  c.vocab = vocab_from_json(ck.user["vocab"], path);
  if (std::int64_t(c.vocab.size()) != c.config.vocab_size)
    throw InputError(fmt::format("{}: vocab has {} entries but vocab_size is {}", path, c.vocab.size(), c.config.vocab_size));
  train::load_params(c.params, ck.params, gpt_params(c.config), path);
  return c;
}

namespace {
// The next token from one row of logits (V): softmax(logits / temperature), among the top k
// when 0 < top_k < V.
std::int32_t draw(const float* logits, std::int64_t V, const SampleOptions& o, std::mt19937_64& rng,
                  std::vector<double>& p) {
  double mx = -INFINITY;
  for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[v]) / o.temperature);
  for (std::int64_t v = 0; v < V; ++v) p[std::size_t(v)] = std::exp(double(logits[v]) / o.temperature - mx);
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[std::size_t(o.top_k - 1)];
    for (double& x : p)
      if (x < kth) x = 0;
  }
  std::discrete_distribution<std::int32_t> pick(p.begin(), p.end());
  return pick(rng);
}
}  // namespace

std::string sample_text(const GptConfig& c, const ParamStore& store, const std::string& vocab, const SampleOptions& o) {
  return sample_texts(c, store, vocab, o, 1).front();
}

std::vector<std::string> sample_texts(const GptConfig& c, const ParamStore& store, const std::string& vocab,
                                      const SampleOptions& o, std::int64_t samples) {
  if (!(o.temperature > 0) || !std::isfinite(o.temperature))
    throw InputError(fmt::format("--temperature must be > 0, got {}", o.temperature));
  if (o.top_k < 0) throw InputError(fmt::format("--top-k must be >= 0, got {}", o.top_k));
  if (o.tokens < 0 || o.tokens > (1 << 24)) throw InputError(fmt::format("--tokens must be in [0, 16777216], got {}", o.tokens));
  if (samples < 1 || samples > 4096) throw InputError(fmt::format("--samples must be in [1, 4096], got {}", samples));
  train::CharData d;
  d.vocab = vocab;
  std::vector<std::int32_t> prompt;
  try {
    prompt = d.encode(o.prompt);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--prompt: {}", e.what()));
  }
  if (prompt.empty()) prompt.push_back(0);
  // The window: block_size, or less when the whole text fits in less (a model with a long
  // context need not plan its whole window to continue a short prompt).
  const std::int64_t N = samples, T = std::min<std::int64_t>(c.block_size, std::int64_t(prompt.size()) + o.tokens),
                     V = c.vocab_size;
  // Bounded work and memory whatever the flags: a forward pass over at most 2^20 tokens, at
  // most 2^26 characters kept in all.
  if (N * T > (std::int64_t(1) << 20))
    throw InputError(fmt::format("--samples {} with a window of {} tokens is {} tokens a forward pass, more than {}", N,
                                 T, N * T, std::int64_t(1) << 20));
  if (N * (std::int64_t(prompt.size()) + o.tokens) > (std::int64_t(1) << 26))
    throw InputError(fmt::format("--samples {} x {} characters each is more than {} characters in all", N,
                                 std::int64_t(prompt.size()) + o.tokens, std::int64_t(1) << 26));
  Graph g;
  Gpt m = build_gpt(g, c, N, T, /*with_loss=*/false, /*training=*/false);
  ParamStore params = store;
  Executor ex(g, {m.logits.id}, params);
  std::vector<std::vector<std::int32_t>> ids(std::size_t(N), prompt);
  std::vector<std::mt19937_64> rng;
  for (std::int64_t i = 0; i < N; ++i) rng.emplace_back(o.seed + std::uint64_t(i));
  std::vector<std::int32_t> window(static_cast<std::size_t>(N * T), 0);
  std::vector<double> p(static_cast<std::size_t>(V));
  for (std::int64_t step = 0; step < o.tokens; ++step) {
    // Every row is as long as the others. The causal mask lets position len-1 see only the
    // real tokens before it.
    const std::int64_t len = std::min<std::int64_t>(T, std::int64_t(ids[0].size()));
    std::fill(window.begin(), window.end(), 0);
    for (std::int64_t i = 0; i < N; ++i)
      std::copy(ids[std::size_t(i)].end() - len, ids[std::size_t(i)].end(), window.begin() + i * T);
    ex.set_input("tokens", std::span<const std::int32_t>(window));
    ex.run();
    const float* logits = ex.value(m.logits.id).f();  // logits: (N, T, V)
    for (std::int64_t i = 0; i < N; ++i)
      ids[std::size_t(i)].push_back(draw(logits + (i * T + len - 1) * V, V, o, rng[std::size_t(i)], p));
  }
  std::vector<std::string> out;
  for (const auto& row : ids)
    out.push_back(o.prompt + d.decode(std::vector<std::int32_t>(row.end() - o.tokens, row.end())));
  return out;
}

}  // namespace gg::models
