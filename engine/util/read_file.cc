#include "engine/util/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace flatstate {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
  }
  // One read into a buffer of the file's size (a regular file), then reads on through a 64 KiB
  // buffer for anything fstat did not tell (a pipe) or that grew meanwhile.
  struct stat st;
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    out.resize(static_cast<size_t>(st.st_size));
  }
  size_t got = 0;
  char buf[1 << 16];
  while (true) {
    const bool into_out = got < out.size();
    const ssize_t n =
        into_out ? ::read(fd, out.data() + got, out.size() - got) : ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": read error: ", std::strerror(err)));
    }
    if (n == 0) break;
    if (!into_out) {
      out.resize(got);
      out.append(buf, static_cast<size_t>(n));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace flatstate
