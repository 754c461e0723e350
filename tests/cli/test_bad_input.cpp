// The bad-input matrix: every way of feeding gradgraph something wrong that the reliability
// issue lists (and the earlier reliability cases), each as one row: the files it makes, the
// command, the exit status expected and what the one-line message must say. Every refusal
// must be one line on stderr, under 300 bytes, starting "gradgraph: error:". Rows that
// must be accepted (a short prompt on a model with a long context, a valid resume) say so.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/gpt.h"
#include "train/checkpoint.h"
#include "run_cli.h"

using namespace gg_cli_test;

namespace {

using gg::test::contains;

struct Row {
  const char* name;
  // Makes the files the command needs in `dir` and returns the command's arguments.
  std::function<std::string(const TempDir& dir)> setup;
  int status;                         // 0: accepted; 1 or 2: refused
  std::vector<std::string> message;   // fragments the stderr line must hold (refusals)
};

const std::string kConfig = quote(golden("ref_basic.config.json"));
const std::string kWeights = quote(golden("ref_basic.weights.safetensors"));
const std::string kBatch = quote(golden("ref_basic.batch.safetensors"));
const std::string kBatches = quote(golden("ref_basic.batches.safetensors"));

// A tiny char-LM run with a checkpoint every step: returns the train arguments (without
// --steps) and leaves dir/run/checkpoint.safetensors at step 2.
std::string tiny_train(const TempDir& dir, const std::string& extra = "--block-size 8") {
  const std::string args = "train --quiet --data " + quote(text_file(dir)) + " --out-dir " + quote(dir.file("run")) +
                           " --n-layer 1 --n-embd 16 --n-head 2 --batch-size 2 --eval-interval 1"
                           " --eval-iters 1 --final-eval-iters 1 --sample-tokens 0 --warmup 0 " + extra;
  const Result r = run(args + " --steps 2");
  REQUIRE_MESSAGE(r.status == 0, r.err);
  return args;
}

// Rewrites the tiny run's checkpoint with `edit` applied, and returns a --resume command.
std::string edited_checkpoint(const TempDir& dir, const std::function<void(gg::io::File&)>& edit) {
  const std::string args = tiny_train(dir);
  const std::string path = dir.file("run/checkpoint.safetensors");
  gg::io::File f = gg::io::read_safetensors(path);
  edit(f);
  gg::io::write_safetensors(path, f);
  return args + " --steps 4 --resume";
}

// Replaces tensor `name` of `f` by an F32 tensor of `shape` (values 0).
void replace(gg::io::File& f, const std::string& name, std::vector<std::int64_t> shape) {
  for (auto it = f.tensors.begin(); it != f.tensors.end(); ++it)
    if (it->first == name) {
      f.tensors.erase(it);
      break;
    }
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  f.add_f32(name, shape, std::vector<float>(std::size_t(n)));
}

std::string deep_json(int depth) { return std::string(std::size_t(depth), '[') + std::string(std::size_t(depth), ']'); }

std::string safetensors_with_header(const std::string& header, const std::string& data = "") {
  std::string s(8, '\0');
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[std::size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s + header + data;
}

const std::vector<Row> kRows = {
    // ---- crashes: optimizer state of the wrong size, deep JSON ----
    {"resume: AdamW m of the wrong size",
     [](const TempDir& d) { return edited_checkpoint(d, [](auto& f) { replace(f, "optim.adam_m.tok_emb.weight", {3}); }); },
     1, {"checkpoint.safetensors", "tok_emb.weight"}},
    {"resume: AdamW v one element short",
     [](const TempDir& d) {
       return edited_checkpoint(d, [](auto& f) { replace(f, "optim.adam_v.norm_f.weight", {15}); });
     },
     1, {"norm_f.weight"}},
    {"config nested 100,000 deep",
     [](const TempDir& d) {
       write(d.file("deep.json"), "{\"n_layer\": " + deep_json(100000) + "}");
       return "train --quiet --config " + quote(d.file("deep.json"));
     },
     1, {"deep.json"}},
    {"checkpoint whose model options are nested 100,000 deep",
     [](const TempDir& d) {
       const std::string args = tiny_train(d);
       gg::io::File f = gg::io::read_safetensors(d.file("run/checkpoint.safetensors"));
       f.metadata["model_options"] = deep_json(100000);
       gg::io::write_safetensors(d.file("run/checkpoint.safetensors"), f);
       return "sample --checkpoint " + quote(d.file("run/checkpoint.safetensors"));
     },
     1, {"checkpoint.safetensors"}},
    // ---- silent acceptance ----
    {"resume: optimizer state too big",
     [](const TempDir& d) {
       return edited_checkpoint(d, [](auto& f) { replace(f, "optim.adam_m.norm_f.bias", {17}); });
     },
     1, {"norm_f.bias"}},
    {"resume: optimizer state transposed (same count)",
     [](const TempDir& d) {
       return edited_checkpoint(d, [](auto& f) { replace(f, "optim.adam_m.blocks.0.mlp.fc1.weight", {16, 64}); });
     },
     1, {"blocks.0.mlp.fc1.weight"}},
    {"resume: optimizer state missing",
     [](const TempDir& d) {
       return edited_checkpoint(d, [](auto& f) {
         std::erase_if(f.tensors, [](auto& t) { return t.first == "optim.adam_v.tok_emb.weight"; });
       });
     },
     1, {"tok_emb.weight"}},
    {"resume: step '2abc'",
     [](const TempDir& d) { return edited_checkpoint(d, [](auto& f) { f.metadata["step"] = "2abc"; }); }, 1,
     {"step", "2abc"}},
    {"resume: garbage RNG state",
     [](const TempDir& d) { return edited_checkpoint(d, [](auto& f) { f.metadata["rng"] = "garbage"; }); }, 1,
     {"RNG"}},
    {"resume: empty RNG state",
     [](const TempDir& d) { return edited_checkpoint(d, [](auto& f) { f.metadata["rng"] = ""; }); }, 1, {"RNG"}},
    {"resume: truncated RNG state",
     [](const TempDir& d) {
       return edited_checkpoint(d, [](auto& f) { f.metadata["rng"] = f.metadata["rng"].substr(0, 100); });
     },
     1, {"RNG"}},
    {"safetensors header followed by a NUL and more bytes",
     [](const TempDir& d) {
       write(d.file("w.safetensors"), safetensors_with_header(std::string("{}") + '\0' + "xx"));
       return "grad --config " + kConfig + " --weights " + quote(d.file("w.safetensors")) + " --batch " + kBatch +
              " --out " + quote(d.file("g.safetensors"));
     },
     1, {"w.safetensors"}},
    {"safetensors header preceded by a UTF-8 BOM",
     [](const TempDir& d) {
       write(d.file("w.safetensors"), safetensors_with_header("\xEF\xBB\xBF{}"));
       return "grad --config " + kConfig + " --weights " + quote(d.file("w.safetensors")) + " --batch " + kBatch +
              " --out " + quote(d.file("g.safetensors"));
     },
     1, {"w.safetensors"}},
    {"config: layernorm_eps 1e300 (infinite as float32)",
     [](const TempDir& d) {
       write(d.file("c.json"), R"({"vocab_size": 13, "block_size": 8, "n_layer": 2, "n_head": 2, "n_embd": 16, "bias": true,
"pos_encoding": "learned", "tie_weights": true, "gelu": "erf", "layernorm_eps": 1e300})");
       return "inspect --config " + quote(d.file("c.json"));
     },
     1, {"layernorm_eps"}},
    {"config: a duplicate key",
     [](const TempDir& d) {
       write(d.file("c.json"), R"({"steps": 5, "steps": 6})");
       return "train --quiet --config " + quote(d.file("c.json"));
     },
     1, {"c.json", "duplicate key 'steps'"}},
    {"train --top-k 4294967297", [](const TempDir&) { return std::string("train --top-k 4294967297"); }, 1, {"--top-k"}},
    {"train --seed -1", [](const TempDir&) { return std::string("train --seed -1"); }, 1, {"--seed"}},
    {"train --sample-tokens -5", [](const TempDir&) { return std::string("train --sample-tokens -5"); }, 1,
     {"--sample-tokens"}},
    {"train --weight-decay inf", [](const TempDir&) { return std::string("train --weight-decay inf"); }, 1,
     {"--weight-decay"}},
    {"sample --top-k 4294967297", [](const TempDir&) { return std::string("sample --checkpoint x --top-k 4294967297"); },
     1, {"--top-k"}},
    {"sample --samples 0", [](const TempDir&) { return std::string("sample --checkpoint x --samples 0"); }, 1,
     {"--samples"}},
    {"replay --lr 1e8 writes no non-finite parameters",
     [](const TempDir& d) {
       return "replay --config " + kConfig + " --weights " + kWeights + " --batches " + kBatches +
              " --optimizer sgd --lr 1e8 --out " + quote(d.file("r.safetensors"));
     },
     1, {"non-finite", "--allow-nonfinite"}},
    // ---- hangs ----
    {"train --steps 99999999999999999999", [](const TempDir&) { return std::string("train --steps 99999999999999999999"); },
     1, {"--steps"}},
    {"a FIFO with no writer as --weights",
     [](const TempDir& d) {
       ::mkfifo(d.file("fifo").c_str(), 0600);
       return "grad --config " + kConfig + " --weights " + quote(d.file("fifo")) + " --batch " + kBatch + " --out " +
              quote(d.file("g.safetensors"));
     },
     1, {"fifo"}},
    {"a FIFO with no writer as --config",
     [](const TempDir& d) {
       ::mkfifo(d.file("fifo").c_str(), 0600);
       return "train --config " + quote(d.file("fifo"));
     },
     1, {"fifo"}},
    {"a FIFO with no writer as --data",
     [](const TempDir& d) {
       ::mkfifo(d.file("fifo").c_str(), 0600);
       return "train --quiet --data " + quote(d.file("fifo"));
     },
     1, {"fifo"}},
    // ---- memory ----
    {"--config /dev/zero", [](const TempDir&) { return std::string("train --config /dev/zero"); }, 1, {"/dev/zero"}},
    {"train --data /dev/zero", [](const TempDir&) { return std::string("train --quiet --data /dev/zero"); }, 1,
     {"/dev/zero"}},
    {"a long-context checkpoint samples a short prompt without planning its whole window",
     [](const TempDir& d) {
       // Training with a 30,000-token window would itself need gigabytes: the checkpoint is
       // written directly, as fit() would write it.
       gg::models::GptConfig c;
       c.vocab_size = 4, c.block_size = 30000, c.n_layer = 1, c.n_head = 2, c.n_embd = 16;
       c.pos_encoding = gg::models::GptConfig::Pos::sinusoidal;
       gg::train::Model m = gg::models::gpt_model(c);
       m.declare({{"tokens", gg::Tensor({1, 1}, gg::DType::i32)}});
       m.init_params(1);
       gg::train::Checkpoint ck;
       ck.model_kind = "gpt";
       ck.model_options = gg::models::to_json(c);
       ck.params = m.params().all();
       ck.optimizer = "adamw";
       ck.user["vocab"] = "[32,101,104,116]";
       gg::train::save_checkpoint(d.file("ck.safetensors"), ck);
       return "sample --checkpoint " + quote(d.file("ck.safetensors")) + " --tokens 5 --prompt the";
     },
     0, {}},
    // ---- messages ----
    {"a 5 MB gelu value is cut",
     [](const TempDir& d) {
       write(d.file("c.json"), "{\"gelu\": \"" + std::string(5 << 20, 'x') + "\"}");
       return "train --config " + quote(d.file("c.json"));
     },
     1, {"gelu", "..."}},
    {"a 200 KB tensor name is cut",
     [](const TempDir& d) {
       gg::io::File f = gg::io::read_safetensors(golden("ref_basic.weights.safetensors"));
       f.add_f32(std::string(200000, 'n'), {1}, {0});
       gg::io::write_safetensors(d.file("w.safetensors"), f);
       return "grad --config " + kConfig + " --weights " + quote(d.file("w.safetensors")) + " --batch " + kBatch +
              " --out " + quote(d.file("g.safetensors"));
     },
     1, {"unexpected", "..."}},
    {"the missing list of a 1024-layer config is counted",
     [](const TempDir& d) {
       write(d.file("c.json"), R"({"vocab_size": 13, "block_size": 8, "n_layer": 1024, "n_head": 2, "n_embd": 16,
"bias": true, "pos_encoding": "learned", "tie_weights": true, "gelu": "erf", "layernorm_eps": 1e-5})");
       return "grad --config " + quote(d.file("c.json")) + " --weights " + kWeights + " --batch " + kBatch + " --out " +
              quote(d.file("g.safetensors"));
     },
     1, {"missing", "more"}},
    {"a JSON syntax error quotes little",
     [](const TempDir& d) {
       write(d.file("c.json"), "{\"steps\": 5, " + std::string(7000, ' ') + std::string(7000, 'x') + "}");
       return "train --config " + quote(d.file("c.json"));
     },
     1, {"c.json"}},
    // ---- losing work ----
    {"a diverging run keeps the last good checkpoint",
     [](const TempDir& d) {  // 4 good steps, then SGD with momentum at lr 10, unclipped: infinite by step 25
       const std::string args = "train --quiet --data " + quote(text_file(d)) + " --out-dir " + quote(d.file("run")) +
                                " --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 --batch-size 2 --eval-interval 2"
                                " --eval-iters 1 --final-eval-iters 1 --sample-tokens 0 --warmup 0 --optimizer sgd"
                                " --momentum 0.9 --clip 0";
       const Result good = run(args + " --steps 4 --lr 0.1 --min-lr 0.1");
       REQUIRE_MESSAGE(good.status == 0, good.err);
       return args + " --steps 60 --resume --lr 10 --min-lr 10";
     },
     1, {"diverged", "last good checkpoint"}},
};

}  // namespace

TEST_CASE("the bad-input matrix: every row refused with one short line, or accepted") {
  for (const Row& row : kRows) {
    TempDir dir;
    const std::string args = row.setup(dir);
    const Result r = run(args);
    INFO(std::string(row.name) << "\nargs: " << args.substr(0, 300) << "\nexit " << r.status << "\nstderr: " << r.err.substr(0, 600));
    if (row.status == 0) {
      CHECK(r.status == 0);
      continue;
    }
    CHECK(r.status == row.status);
    CHECK(r.err_lines() == 1);
    CHECK(r.err.rfind("gradgraph: error: ", 0) == 0);
    CHECK(r.err.size() < 300);
    for (const std::string& m : row.message) CHECK_MESSAGE(contains(r.err, m), "the message should say '" << m << "'");
  }
  MESSAGE(kRows.size() << " rows");
}

TEST_CASE("cli: sample --samples N prints N continuations side by side, the i-th the one --seed s + i gives") {
  TempDir dir;
  tiny_train(dir);
  const std::string base = "sample --checkpoint " + quote(dir.file("run/checkpoint.safetensors")) + " --tokens 12 --prompt the";
  const Result batch = run(base + " --samples 3 --seed 7");
  INFO("stdout: " << batch.out << "\nstderr: " << batch.err);
  REQUIRE(batch.status == 0);
  for (int i = 0; i < 3; ++i) {
    const std::string header = "--- sample " + std::to_string(i + 1) + " (seed " + std::to_string(7 + i) + ") ---\n";
    const std::size_t at = batch.out.find(header);
    REQUIRE(at != std::string::npos);
    const Result one = run(base + " --seed " + std::to_string(7 + i));
    REQUIRE(one.status == 0);
    CHECK(batch.out.compare(at + header.size(), one.out.size(), one.out) == 0);  // "the..." and its newline
  }
  const Result single = run(base + " --seed 7");
  CHECK(single.out.find("--- sample") == std::string::npos);  // one sample: the text alone, as before
}
