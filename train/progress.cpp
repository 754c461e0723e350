// The progress line: formatting (bar, percent, loss, throughput, ETA) and the choice
// between redrawing in place on a terminal and printing sparse plain lines elsewhere.
// Not here: measuring throughput (the caller passes tokens per second).
#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace gg::train {

namespace {

constexpr int bar_width = 20;
constexpr double redraw_every_s = 0.1;  // TTY: at most ten redraws a second
constexpr std::int64_t plain_buckets = 10;  // plain: a line every 10%

int digits(std::int64_t n) {
  int d = 1;
  while (n >= 10) n /= 10, ++d;
  return d;
}

}  // namespace

Progress::Progress(std::int64_t total_steps, std::FILE* out, std::string unit)
    : total_(total_steps), out_(out), unit_(std::move(unit)), tty_(out && ::isatty(::fileno(out)) == 1),
      start_(std::chrono::steady_clock::now()) {
  if (total_steps < 1) throw std::invalid_argument(fmt::format("Progress: total_steps is {}, must be >= 1", total_steps));
}

Progress::~Progress() { finish(); }

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  auto t = static_cast<std::int64_t>(std::llround(s));
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}

std::string Progress::format_rate(double r) {
  if (!std::isfinite(r) || r < 0) return "--";
  if (r < 1e3) return fmt::format("{:.0f}", r);
  if (r < 1e6) return fmt::format("{:.1f}k", r / 1e3);
  return fmt::format("{:.2f}M", r / 1e6);
}

std::string Progress::format_line(std::int64_t step, std::int64_t total, double loss, double tokens_per_sec,
                                  double eta_seconds, const std::string& unit) {
  std::int64_t shown = std::clamp<std::int64_t>(step, 0, total);
  double frac = total > 0 ? static_cast<double>(shown) / static_cast<double>(total) : 0.0;
  int filled = static_cast<int>(frac * bar_width);
  std::string bar = std::string(filled, '#') + std::string(bar_width - filled, '.');
  return fmt::format("step {:>{}}/{} [{}] {:3}% | loss {:.4f} | {} {}/s | ETA {}", step, digits(total), total,
                     bar, static_cast<int>(frac * 100), loss, format_rate(tokens_per_sec), unit,
                     format_duration(eta_seconds));
}

void Progress::draw(const std::string& line) {
  if (!out_) return;
  if (tty_) {
    fmt::print(out_, "\r{}\x1b[K", line);  // \x1b[K clears what a longer line left
    line_ = line;
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void Progress::message(const std::string& text) {
  if (!out_ || finished_) return;
  if (tty_ && !line_.empty()) fmt::print(out_, "\r{}\x1b[K\n{}", text, line_);
  else fmt::print(out_, "{}\n", text);
  std::fflush(out_);
}

void Progress::update(std::int64_t step, double loss, double tokens_per_sec) {
  if (finished_) return;
  step_ = step;
  loss_ = loss;
  rate_ = tokens_per_sec;
  double t = elapsed();
  bool last = step >= total_;
  bool due;
  if (tty_) {
    due = last || last_draw_ < 0 || t - last_draw_ >= redraw_every_s;
  } else {
    std::int64_t bucket = std::clamp<std::int64_t>(step, 0, total_) * plain_buckets / total_;
    due = printed_bucket_ < 0 || bucket > printed_bucket_;
    if (due) printed_bucket_ = bucket;
  }
  shown_ = due;
  if (!due) return;
  last_draw_ = t;
  double eta = step > 0 ? t * static_cast<double>(total_ - step) / static_cast<double>(step) : -1.0;
  draw(format_line(step, total_, loss, tokens_per_sec, eta, unit_));
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (!out_) return;
  double t = elapsed();
  double eta = step_ > 0 ? t * static_cast<double>(total_ - step_) / static_cast<double>(step_) : -1.0;
  std::string line = format_line(step_, total_, loss_, rate_, eta, unit_);
  if (tty_) fmt::print(out_, "\r{}\x1b[K\n", line);
  else if (!shown_) fmt::print(out_, "{}\n", line);
  fmt::print(out_, "done: {}/{} steps in {}\n", step_, total_, format_duration(t));
  std::fflush(out_);
}

}  // namespace gg::train
