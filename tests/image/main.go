// Command image-builder writes edgegate's container image without a container engine, run by
// scripts/image.sh (which fetches the Debian packages and builds the binaries):
//
//	layer 1: a root filesystem of libc6 and libgcc-s1 (already extracted with `dpkg-deb -x` into
//	         --rootfs), /etc/passwd and /etc/group with the user nonroot (65532), /tmp (1777) and
//	         /home/nonroot;
//	layer 2: /usr/local/bin/{edgegate-webhook,edgegate-pruner,edgegate-producer,edgegate}.
//
// The archive is a docker-style image tarball (tarball.Write: manifest.json, the config, one
// gzipped tar per layer), which is what `crane push FILE REF` and `docker load` read. It is
// deterministic: every tar entry is owned by 0:0 (but /home/nonroot, 65532:65532) with no user or
// group names, keeps its mode, has the mtime --epoch and comes in sorted order; gzip carries no
// name or time; the config's times are --epoch too. The same inputs give the same digest, printed
// on stdout, and it is the digest `crane push` gives the pushed manifest (checked by reading the
// archive back). --arch names the platform (amd64, arm64) the binaries and packages are for.
//
// `image-builder index --out DIR ARCHIVE...` writes the archives' images as one OCI image index
// (each entry's platform read from its config) in an OCI image layout at DIR, which
// `crane push --index DIR REF` pushes; it prints the index's digest. Deterministic too.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
)

// The binaries, in /usr/local/bin; the first is the entrypoint.
var binaries = []string{"edgegate-webhook", "edgegate-pruner", "edgegate-producer", "edgegate"}

const (
	uid     = 65532
	binDir  = "usr/local/bin"
	pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	passwd  = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group   = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
)

// One tar entry: a header and, for a regular file, where its bytes come from.
type entry struct {
	hdr  tar.Header
	data []byte // in memory, or
	file string // read from this path
}

func main() {
	rootfs := flag.String("rootfs", "", "directory holding the extracted Debian packages (layer 1)")
	packages := flag.String("packages", "", "what --rootfs holds, for the layer's history (e.g. \"libc6=2.36-9 libgcc-s1=12.2.0-14\")")
	bins := flag.String("bin-dir", "", "directory holding the four binaries (layer 2)")
	out := flag.String("out", "", "image tarball to write")
	tag := flag.String("tag", "ghcr.io/datum-cloud/edgegate:latest", "the tag recorded in the tarball's manifest.json")
	epoch := flag.Int64("epoch", 0, "the time of every file and of the image (seconds since 1970)")
	source := flag.String("source", "", "label org.opencontainers.image.source")
	revision := flag.String("revision", "", "label org.opencontainers.image.revision")
	version := flag.String("version", "", "label org.opencontainers.image.version")
	level := flag.Int("gzip-level", gzip.DefaultCompression, "gzip level of the layers")
	arch := flag.String("arch", "amd64", "the platform's architecture (linux/ARCH): amd64 or arm64")
	if len(os.Args) > 1 && os.Args[1] == "index" {
		indexOut := flag.NewFlagSet("index", flag.ExitOnError)
		dir := indexOut.String("out", "", "OCI image layout directory to write (must not exist)")
		_ = indexOut.Parse(os.Args[2:])
		if *dir == "" || indexOut.NArg() == 0 {
			fail(fmt.Errorf("index: --out DIR and at least one image archive are required"))
		}
		digest, err := index(*dir, indexOut.Args())
		if err != nil {
			fail(err)
		}
		fmt.Println(digest)
		return
	}
	flag.Parse()
	if *rootfs == "" || *bins == "" || *out == "" {
		fail(fmt.Errorf("--rootfs, --bin-dir and --out are required"))
	}
	if *arch != "amd64" && *arch != "arm64" {
		fail(fmt.Errorf("--arch %q: amd64 or arm64", *arch))
	}
	digest, err := build(*rootfs, *packages, *bins, *out, *tag, *arch, time.Unix(*epoch, 0).UTC(), map[string]string{
		"org.opencontainers.image.source":   *source,
		"org.opencontainers.image.revision": *revision,
		"org.opencontainers.image.version":  *version,
	}, *level)
	if err != nil {
		fail(err)
	}
	fmt.Println(digest)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image-builder:", err)
	os.Exit(1)
}

func build(rootfs, packages, bins, out, tag, arch string, t time.Time, labels map[string]string, level int) (string, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".image-builder-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)

	base, err := walk(rootfs, "")
	if err != nil {
		return "", err
	}
	base = append(base,
		dir("etc", 0o755, 0), dir("tmp", 0o777|fs.ModeSticky, 0), dir("home", 0o755, 0), dir("home/nonroot", 0o700, uid),
		file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
	)
	var app []entry
	for _, b := range binaries {
		p := filepath.Join(bins, b)
		info, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable file", p)
		}
		app = append(app, entry{hdr: header(path.Join(binDir, b), tar.TypeReg, info.Mode().Perm(), info.Size(), 0), file: p})
	}

	img := empty.Image
	for i, l := range []struct {
		entries []entry
		by      string
	}{
		{base, "edgegate image-builder: root filesystem: " + packages + ", /etc/passwd, /etc/group (nonroot 65532)"},
		{app, "edgegate image-builder: /usr/local/bin/{" + strings.Join(binaries, ",") + "}"},
	} {
		gz := filepath.Join(tmp, fmt.Sprintf("layer%d.tar.gz", i+1))
		if err := writeLayer(gz, l.entries, t, level); err != nil {
			return "", err
		}
		layer, err := tarball.LayerFromFile(gz)
		if err != nil {
			return "", err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: t}, CreatedBy: l.by}})
		if err != nil {
			return "", err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: t}
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint: []string{"/" + path.Join(binDir, binaries[0])},
		WorkingDir: "/",
		Env:        []string{pathEnv},
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}

	part := out + ".tmp"
	f, err := os.Create(part)
	if err != nil {
		return "", err
	}
	if err := tarball.Write(ref, img, f); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	// What crane push (crane.Load → tarball.ImageFromPath) will push must be what was built.
	back, err := tarball.ImageFromPath(part, nil)
	if err != nil {
		return "", err
	}
	if got, err := back.Digest(); err != nil || got != digest {
		return "", fmt.Errorf("the archive reads back as %v (%v), not %v", got, err, digest)
	}
	return digest.String(), os.Rename(part, out)
}

// index writes the images of the archives as one OCI image index in an OCI image layout at dir,
// each entry with its config's platform, and returns the index's digest.
func index(dir string, archives []string) (string, error) {
	if _, err := os.Stat(dir); err == nil {
		return "", fmt.Errorf("%s exists", dir)
	}
	ii := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	seen := map[string]string{}
	for _, a := range archives {
		img, err := tarball.ImageFromPath(a, nil)
		if err != nil {
			return "", fmt.Errorf("%s: %w", a, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return "", fmt.Errorf("%s: %w", a, err)
		}
		platform := cf.Platform()
		if platform == nil || platform.OS == "" || platform.Architecture == "" {
			return "", fmt.Errorf("%s: its config names no platform", a)
		}
		if other, ok := seen[platform.String()]; ok {
			return "", fmt.Errorf("%s and %s are both %s", other, a, platform)
		}
		seen[platform.String()] = a
		ii = mutate.AppendManifests(ii, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platform}})
	}
	if _, err := layout.Write(dir, ii); err != nil {
		return "", err
	}
	// What crane push --index (layout.ImageIndexFromPath) will push must be what was built.
	back, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return "", err
	}
	want, err := ii.Digest()
	if err != nil {
		return "", err
	}
	got, err := back.Digest()
	if err != nil || got != want {
		return "", fmt.Errorf("the layout reads back as %v (%v), not %v", got, err, want)
	}
	return want.String(), nil
}

// walk lists the tree under root (not root itself), as entries named prefix/relative path.
func walk(root, prefix string) ([]entry, error) {
	var entries []entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := path.Join(prefix, filepath.ToSlash(rel))
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		mode := info.Mode()
		perm := mode.Perm() | mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		switch {
		case mode.IsDir():
			entries = append(entries, dir(name, perm, 0))
		case mode.IsRegular(): // a hard link becomes a copy
			entries = append(entries, entry{hdr: header(name, tar.TypeReg, perm, info.Size(), 0), file: p})
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h := header(name, tar.TypeSymlink, 0o777, 0, 0)
			h.Linkname = target
			entries = append(entries, entry{hdr: h})
		default:
			return fmt.Errorf("%s: unsupported file type %v", p, mode.Type())
		}
		return nil
	})
	return entries, err
}

func dir(name string, mode fs.FileMode, owner int) entry {
	return entry{hdr: header(name, tar.TypeDir, mode, 0, owner)}
}

func file(name string, mode fs.FileMode, data []byte) entry {
	return entry{hdr: header(name, tar.TypeReg, mode, int64(len(data)), 0), data: data}
}

func header(name string, typ byte, mode fs.FileMode, size int64, owner int) tar.Header {
	m := int64(mode.Perm())
	if mode&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return tar.Header{Name: name, Typeflag: typ, Mode: m, Size: size, Uid: owner, Gid: owner}
}

// writeLayer writes the entries, sorted by name and without duplicates (an entry given later
// replaces an earlier one of the same name; directories missing from the list are added), as a
// gzipped tar to path.
func writeLayer(p string, entries []entry, t time.Time, level int) error {
	byName := map[string]entry{}
	for _, e := range entries {
		e.hdr.Name = strings.TrimSuffix(e.hdr.Name, "/")
		if old, ok := byName[e.hdr.Name]; ok && old.hdr.Typeflag == tar.TypeDir && e.hdr.Typeflag == tar.TypeDir && old.hdr.Mode != e.hdr.Mode {
			e = old // a directory the packages made keeps their mode
		}
		byName[e.hdr.Name] = e
		for d := path.Dir(e.hdr.Name); d != "."; d = path.Dir(d) {
			if _, ok := byName[d]; !ok {
				byName[d] = dir(d, 0o755, 0)
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)

	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, level) // no name, no mtime in the gzip header (klauspost: about twice as fast as compress/gzip)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, n := range names {
		e := byName[n]
		h := e.hdr
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		h.ModTime = t
		if err := writeEntry(tw, &h, e); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// writeEntry writes the header and the bytes. A file's size is taken from the file as opened, so
// one replaced since it was listed (a binary relinked by cargo) is written whole, as it is now.
func writeEntry(tw *tar.Writer, h *tar.Header, e entry) error {
	if e.file == "" {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.Copy(tw, bytes.NewReader(e.data))
		return err
	}
	f, err := os.Open(e.file)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", e.file)
	}
	h.Size = info.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, h.Size)
	return err
}
