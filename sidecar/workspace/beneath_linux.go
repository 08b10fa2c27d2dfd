package workspace

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// beneath answers the question every turn asks, whether its directory is
// there as a real directory, with one openat2 (Linux 5.6) that resolves the
// whole path beneath the root and refuses any symbolic link on the way:
// three system calls for a session's directory, where the walk through
// os.Root looks at each element in turn (nine). Whatever else it finds (an
// element missing, a link, a file, an error) it leaves to the walk, which
// says what is wrong or creates what is missing; a kernel or seccomp
// profile without openat2 turns it off. Its methods run under Manager.mu.
type beneath struct {
	fd   int // the root, opened O_PATH; -1: off
	hits int // questions answered, for tests
}

func openBeneath(root string) *beneath {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &beneath{fd: -1}
	}
	return &beneath{fd: fd}
}

// modTime is the modification time of rel when it is a real directory
// beneath the root, reached through real directories only; ok is false
// for anything else.
func (b *beneath) modTime(rel string) (mod time.Time, ok bool) {
	if b.fd < 0 {
		return time.Time{}, false
	}
	fd, err := unix.Openat2(b.fd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		b.close() // no openat2 here (an older kernel, a seccomp profile that refuses it)
	}
	if err != nil {
		return time.Time{}, false
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return time.Time{}, false
	}
	b.hits++
	return time.Unix(st.Mtim.Unix()), true
}

func (b *beneath) close() {
	if b.fd >= 0 {
		_ = unix.Close(b.fd)
		b.fd = -1
	}
}
