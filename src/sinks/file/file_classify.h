#pragma once
// The file sink's failure classes, decided in one place (docs/sinks_file_http.md, "Failure
// classes (file)"): an errno of open(), write() or fdatasync() says whether the file or its
// disk is unavailable (the relay pauses the sink, no attempt is counted), refused the batch
// (`failed`, an attempt), or is gone for good (Sink::closed(): the relay stops).

namespace outpost::file {

enum class Outcome { unavailable, refused, closed };

// unavailable: the disk is full or failing or the file cannot be reached now: ENOSPC, EDQUOT,
//   EIO, EROFS (remounted read-only after errors), EFBIG, ENOENT/ENOTDIR (the directory was
//   removed), EACCES/EPERM, EMFILE/ENFILE/ENOMEM, EAGAIN, ESTALE, ETIMEDOUT, ENXIO, ENODEV.
// closed: EPIPE on standard output (`file:-`): its reader went away and nothing can reopen it.
//   (On a named pipe the sink reopens it instead and reports ENXIO until a reader opens it.)
// refused: anything else (EINVAL, EBADF, ...: the file cannot take what was asked).
Outcome classify(int err);

}  // namespace outpost::file
