"""The view's names other than the local files (pure): each should be an absolute link into the snapshot.
What is there instead is judged here (docs/staging.md, "Hand-made trees and other people's files"):

- a link of labkit's (listed in the manifest) is replaced silently; anyone else's link is replaced and
  named in the report (a link holds no data);
- a regular file or a folder that is a copy of the snapshot's entry (size and sampled blocks of every
  file, and the whole-file hash in deep mode) is a tree copied by hand: it is adopted and kept as it is;
- any other regular file is the user's own (an edited config.json, a mistyped dst): it is never replaced
  unless the user names it (`--replace-foreign NAME`); a folder is never removed (fix or remove it by hand).
"""

from __future__ import annotations

from labkit.stage.deep import deep_problem, kept_record, sampled_text
from labkit.stage.viewstate import Actions, FileState, Scope


def assess_others(scope: Scope, acts: Actions) -> tuple[dict[str, str], int]:
    """Every snapshot entry that is not a local file: ({name: link target}, links already right); hand-made
    copies go into acts.kept, what is refused into acts.refusals."""
    snapshot = scope.probe["snapshot"]
    links, links_ok = {}, 0
    for name, entry in scope.probe["entries"].items():
        if name in scope.spec.local:
            continue
        target = f"{snapshot}/{name}"
        have = scope.view(name)
        state = have["state"]
        if state == "link" and have["target"] == target:
            links[name] = target
            links_ok += 1
            continue
        if state == "dir":
            _judge_folder(scope, name, entry, have, acts)
            continue
        if state in ("file", "other") and not _may_link_over(scope, name, entry, have, acts):
            continue
        if state == "link" and name not in scope.table("links"):
            acts.warnings.append(
                f"{scope.node}: replacing {scope.dst}/{name} -> {have['target']} ({scope.not_ours()}) "
                "with the view's link into the snapshot"
            )
        links[name] = target
        acts.to_link.append({"name": name, "target": target})
    return links, links_ok


def _may_link_over(scope: Scope, name: str, entry: dict, have: dict, acts: Actions) -> bool:
    """A file (or fifo, socket...) where the view needs a link: kept when it is a copy of the snapshot's
    entry; replaced only when the user named it; otherwise refused. True when the link replaces it."""
    problem: str | None
    if have["state"] != "file":
        problem = f"is a {have['state']}, not a copy of the snapshot's {name}"
    elif entry["kind"] != "file":
        problem = f"is a file where the snapshot has a folder {name}"
    else:
        problem = copy_problem(scope, name, entry, have)
    if problem is None:
        acts.kept[name] = kept_file(scope, name, entry, have, acts)
        return False
    if name in scope.replace:
        acts.replace_foreign(scope, name, have, problem, "replaced by a link into the snapshot")
        return True
    acts.refuse_foreign(scope, name, problem, "replace it with a link into the snapshot")
    return False


def copy_problem(scope: Scope, rel: str, want: dict, have: dict) -> str | None:
    """Why a hand-made file is not a copy of the snapshot's file `rel` (None: it is, as far as checked)."""
    if have["size"] != want["size"]:
        return f"has {have['size']} bytes where the snapshot's has {want['size']}"
    if not all(have.get("match", [False])):
        return "differs from the snapshot's in its sampled blocks"
    if scope.deep:  # the whole-file hash decides, whatever the manifest says
        return deep_problem(scope, FileState(rel, want["size"], "adopted", blob=want.get("blob")))
    prev = scope.table("kept").get(rel)
    was = prev.get("blob") if isinstance(prev, dict) else None
    if was and want.get("blob") and was != want["blob"]:
        return (
            f"was kept as a copy of blob {was}; the snapshot's {rel} is blob {want['blob']}: a new revision"
        )
    return None


def kept_file(scope: Scope, rel: str, want: dict, have: dict, acts: Actions) -> FileState:
    """A hand-made copy that checked out: verified when the manifest already keeps it as this blob."""
    f = FileState(rel, want["size"], "adopted", blob=want.get("blob"))
    if scope.deep:
        deep_problem(scope, f)  # sets the record and the check's name (it passed in copy_problem)
    else:
        f.deep = kept_record(scope.table("kept").get(rel), have, f.blob)
        f.check = sampled_text(f.size, scope.block, scope.count, hashed=False)
    prev = scope.table("kept").get(rel)
    if isinstance(prev, dict) and prev.get("size") == f.size and prev.get("blob") == f.blob and f.blob:
        f.status, f.prev = "verified", prev
    else:
        acts.warnings.append(
            f"{scope.node}: {scope.dst}/{rel} is a copy made by hand; it matches the snapshot's "
            f"({f.check}) and is kept as it is"
        )
    return f


def _judge_folder(scope: Scope, name: str, entry: dict, have: dict, acts: Actions) -> None:
    """A folder at a snapshot name: adopted file by file when it is a copy of the snapshot's folder."""
    if entry["kind"] != "dir":
        acts.refusals.append(
            f"{scope.dst}/{name} is a directory where the view needs a link to the snapshot's file; "
            "staging never removes a folder: remove it by hand"
        )
        return
    tree = have.get("tree", {})
    diffs = []
    for rel, want in entry["tree"].items():
        got = tree.get(rel, {"state": "missing"})
        if want["kind"] != "file":
            diffs.append(f"the snapshot's {rel} is dangling")
        elif got["state"] != "file":
            diffs.append(
                f"{scope.dst}/{rel} is {'missing' if got['state'] == 'missing' else 'a ' + got['state']}"
            )
        else:
            problem = copy_problem(scope, rel, want, got)
            if problem:
                diffs.append(f"{scope.dst}/{rel} {problem}")
    if diffs:
        more = f" (+{len(diffs) - 4} more)" if len(diffs) > 4 else ""
        acts.refusals.append(
            f"{scope.dst}/{name} is a folder that is not a copy of the snapshot's {name}: "
            f"{'; '.join(diffs[:4])}{more}; staging never removes a folder: fix or remove it by hand"
        )
        return
    for rel, want in entry["tree"].items():
        acts.kept[rel] = kept_file(scope, rel, want, tree[rel], acts)
    for rel in sorted(set(tree) - set(entry["tree"])):
        acts.warnings.append(
            f"{scope.node}: {scope.dst}/{rel} is not part of snapshot {scope.probe['commit']}; left in place"
        )
