// A terminal progress line for training loops:
//   step  120/2000 [##..................]   6% | loss 2.3412 | 15.2k tok/s | ETA 3m12s
// On a TTY it redraws one line in place ('\r'); otherwise (CI logs, files) it prints a
// plain line at the first step and every 10% so the log stays short.
// Not here: logging to files, metrics, anything about what is being trained.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gg::train {

class Progress {
public:
  // Requires total_steps >= 1 (throws std::invalid_argument otherwise). The clock for the
  // ETA starts here. `out` must outlive the Progress; nullptr makes it silent.
  explicit Progress(std::int64_t total_steps, std::FILE* out = stderr, std::string unit = "tok");
  // Calls finish() if it was not called, so the terminal line is always ended.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Reports that `step` of the total steps are done (1-based: step == total_steps is the
  // end), with the latest loss and throughput. ETA = elapsed * (total - step) / step.
  void update(std::int64_t step, double loss, double tokens_per_sec);
  // Prints `text` as a line of its own (e.g. an eval result) without garbling the bar:
  // on a TTY the bar is cleared, the text printed and the bar redrawn below it.
  void message(const std::string& text);
  // Shows the last state, ends the line and prints "done: <step>/<total> steps in <time>".
  // Idempotent; later update() calls are ignored.
  void finish();

  // The text of one progress line (no '\r' or '\n'); eta_seconds < 0 or NaN shows "--".
  // `unit` names what the rate counts ("tok" for tokens/s, "ex" for examples/s).
  static std::string format_line(std::int64_t step, std::int64_t total_steps, double loss,
                                 double tokens_per_sec, double eta_seconds, const std::string& unit = "tok");
  // "45s", "3m12s", "1h02m"; "--" for a negative or non-finite value.
  static std::string format_duration(double seconds);
  // "950", "15.2k", "1.35M".
  static std::string format_rate(double per_sec);

private:
  double elapsed() const;
  void draw(const std::string& line);

  std::int64_t total_;
  std::FILE* out_;
  std::string unit_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  double last_draw_ = -1;    // seconds since start of the last TTY redraw
  std::int64_t step_ = 0;    // latest reported state
  double loss_ = 0, rate_ = 0;
  bool shown_ = true;        // the latest state has been printed
  std::string line_;         // TTY: the line currently on screen ("" before the first update)
  std::int64_t printed_bucket_ = -1;  // plain mode: last 10% bucket printed
};

}  // namespace gg::train
