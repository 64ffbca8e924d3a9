// A terminal progress bar for long work: "label [#####.....] 45% 123/270 key=value ... ETA 1m02s".
// Draws only when enabled (the CLI enables it when the stream is a terminal and --quiet is absent);
// the library never decides that itself. Draws on stdout unless given another stream (stderr for
// commands whose stdout carries --json).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace arcal {

class ProgressBar {
 public:
  ProgressBar(std::string label, long long total, bool enabled, std::FILE* stream = stdout)
      : label_(std::move(label)),
        total_(total),
        enabled_(enabled),
        stream_(stream),
        start_(std::chrono::steady_clock::now()) {}

  /// Changes the total (work whose size is known only once it starts).
  void set_total(long long total) { total_ = total; }
  ~ProgressBar() { finish(); }

  /// Sets the position and the trailing "key=value" text; redraws at most 10 times a second.
  void update(long long done, const std::string& fields = "") {
    done_ = done;
    fields_ = fields;
    if (!enabled_) return;
    auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    draw(now);
  }

  void finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    draw(std::chrono::steady_clock::now());
    std::fputc('\n', stream_);
    std::fflush(stream_);
  }

  double elapsed_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  void draw(std::chrono::steady_clock::time_point now) {
    const int width = 24;
    const double frac = total_ > 0 ? double(done_) / double(total_) : 0.0;
    const int filled = static_cast<int>(frac * width + 0.5);
    std::string bar(filled, '#');
    bar += std::string(width - filled, '.');
    const double el = std::chrono::duration<double>(now - start_).count();
    const double eta = frac > 0 ? el * (1.0 - frac) / frac : 0.0;
    std::fprintf(stream_, "\r%s [%s] %3d%% %lld/%lld %s ETA %dm%02ds\x1b[K", label_.c_str(), bar.c_str(),
                 static_cast<int>(frac * 100), done_, total_, fields_.c_str(), int(eta) / 60, int(eta) % 60);
    std::fflush(stream_);
  }

  std::string label_;
  long long total_;
  bool enabled_;
  std::FILE* stream_;
  long long done_ = 0;
  std::string fields_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_{};
};

}  // namespace arcal
