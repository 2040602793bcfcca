// Internal: files replaced atomically through a temporary of their own.
//
// A TempFile is a new file next to its target, created with O_CREAT|O_EXCL under a name no other file
// has (".<target name>.kpr-tmp-<pid>-<random>"), so making it never truncates or replaces anything that
// already exists, and two runs writing the same target cannot share a temporary. commit() fsyncs it,
// closes it (every step checked) and renames it over the target. On any failure, and in the destructor
// when commit() was not reached, it removes the temporary it created, never any other file.
//
// A process killed outright (SIGKILL, a power cut) leaves its temporary under that unique name. That is
// deliberate: nothing removes files by a guessed name, since a guess can name somebody else's file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace kpr::util {

class TempFile {
public:
    // Creates the temporary for `target` (in the target's folder). Throws kpr::Error naming the target.
    explicit TempFile(const std::string &target);
    // A temporary that is a new hard link to `from` (no data written): link(2) under a unique name,
    // retried on EEXIST. Returns false (and makes nothing) when the file system cannot link `from` there
    // (EXDEV, EPERM, EMLINK, ENOTSUP; `*why` says which); throws kpr::Error on other failures.
    static bool link_to(const std::string &from, const std::string &target, TempFile &out, std::string *why);
    TempFile() = default;
    ~TempFile();
    TempFile(TempFile &&o) noexcept;
    TempFile &operator=(TempFile &&o) noexcept;
    TempFile(const TempFile &) = delete;
    TempFile &operator=(const TempFile &) = delete;

    const std::string &path() const { return path_; }
    const std::string &target() const { return target_; }
    // The open stream (buffered); null once finish() has run, or for a hard link.
    std::FILE *stream() const { return f_; }

    // Writes n bytes; throws kpr::Error naming the target and the temporary.
    void write(const void *p, size_t n);
    void write(std::string_view s) { write(s.data(), s.size()); }
    // Copies the whole of `from` into the temporary.
    void copy_from(const std::string &from);
    // Flushes, fsyncs and closes the temporary (each checked); the file stays under its temporary name.
    void finish();
    // finish() if not done, then renames the temporary over the target. When the target already is the
    // same file (a hard link of it), the temporary name is simply removed. Throws kpr::Error on failure
    // (the temporary removed).
    void commit();
    // Removes the temporary now (if it is still ours); no error.
    void discard() noexcept;

private:
    std::string target_, path_;
    std::FILE *f_ = nullptr;
    bool live_ = false;  // path_ is a file this object created and has not renamed or removed
};

// Replaces `target` with `bytes` through a TempFile. Throws kpr::Error naming the target.
void write_file_atomic(const std::string &target, std::string_view bytes);

} // namespace kpr::util
