// attnkit::StagedOutputs: checks up front, temporary files beside the targets, and a commit that puts
// back what it replaced when a later rename fails.
#include "attnkit/staged_outputs.hpp"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <system_error>
#include <unistd.h>

#include "attnkit/error.hpp"
#include "io/file_common.hpp"
#include "io/replace_file.hpp"

namespace attnkit {

struct StagedOutputs::Staged {
  std::string path;  // as added, to find it again in write()
  io::OutputTarget target;
  std::string temp;  // empty when written in place
  bool written = false;
  std::string previous;  // during commit: the replaced file's second name, until every rename succeeded
};

namespace {

// `message` with every `from` replaced by `to`.
std::string replaced(std::string message, const std::string& from, const std::string& to) {
  if (from.empty() || from == to) return message;
  for (std::size_t at = message.find(from); at != std::string::npos; at = message.find(from, at + to.size())) {
    message.replace(at, from.size(), to);
  }
  return message;
}

}  // namespace

StagedOutputs::StagedOutputs() = default;

StagedOutputs::~StagedOutputs() { discard(); }

void StagedOutputs::discard() noexcept {
  for (const auto& s : staged_) {
    if (!s->temp.empty()) std::remove(s->temp.c_str());
  }
  staged_.clear();
}

void StagedOutputs::add(const std::string& path, const std::string& argument) {
  const std::string label = argument.empty() ? path : argument + " " + path;
  auto staged = std::make_unique<Staged>();
  staged->path = path;
  staged->target = io::check_output(path, label);
  for (const auto& other : staged_) {
    if (io::same_output(other->target, staged->target)) {
      throw Error(ErrorCode::io_error, label + ": the same file as " + other->target.label +
                                           ": each output needs a file of its own");
    }
  }
  if (!staged->target.in_place) {
    // Created now, so that a directory that refuses new files is found before any work is done.
    const int fd = io::create_temp_beside(staged->target, staged->temp);
    ::close(fd);
  }
  staged_.push_back(std::move(staged));
}

void StagedOutputs::write(const std::string& path, const std::function<void(const std::string& file)>& write_to) {
  Staged* staged = nullptr;
  for (const auto& s : staged_) {
    if (s->path == path) staged = s.get();
  }
  if (staged == nullptr) {
    add(path);
    staged = staged_.back().get();
  }
  const std::string file = staged->target.in_place ? staged->target.path : staged->temp;
  try {
    write_to(file);
  } catch (const Error& e) {
    throw Error(e.code(), replaced(e.what(), file, staged->target.label));
  }
  staged->written = true;
}

void StagedOutputs::commit() {
  std::vector<Staged*> pending;  // written files to rename, in the order added
  for (const auto& s : staged_) {
    if (s->written && !s->temp.empty()) pending.push_back(s.get());
  }
  // 1. Each new file gets the mode (and owner) of the file it replaces.
  for (Staged* s : pending) {
    const int fd = ::open(s->temp.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      throw Error(ErrorCode::io_error, s->target.label + ": cannot reopen the written file: " + io::errno_text(errno));
    }
    try {
      io::keep_attributes(fd, s->target);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  // 2. Every file about to be replaced gets a second name, so that it can be put back.
  const auto forget_previous = [&] {
    for (Staged* s : pending) {
      if (!s->previous.empty()) ::unlink(s->previous.c_str());
      s->previous.clear();
    }
  };
  try {
    for (Staged* s : pending) s->previous = io::keep_previous(s->target);
  } catch (...) {
    forget_previous();
    throw;
  }
  // 3. The renames, in order; a failure puts back the ones before it.
  for (std::size_t k = 0; k < pending.size(); ++k) {
    if (io::rename_file(pending[k]->temp, pending[k]->target.path) == 0) continue;
    std::string message = pending[k]->target.label + ": cannot replace with the written file: " + io::errno_text(errno);
    for (std::size_t j = k; j-- > 0;) {
      Staged& done = *pending[j];
      const bool back = done.previous.empty() ? ::unlink(done.target.path.c_str()) == 0
                                              : io::rename_file(done.previous, done.target.path) == 0;
      if (back) {
        done.previous.clear();
      } else {
        message += "; and " + done.target.label + " could not be put back (" + io::errno_text(errno) + ")" +
                   (done.previous.empty() ? "" : ": its previous contents are in " + done.previous);
        done.previous.clear();  // kept for the user, not removed
      }
      done.temp.clear();  // renamed: nothing left under that name
    }
    forget_previous();
    throw Error(ErrorCode::io_error, message);
  }
  // 4. Every target has its new contents: the old files go.
  forget_previous();
  for (Staged* s : pending) s->temp.clear();
}

}  // namespace attnkit
