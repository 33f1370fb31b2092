"""The local forge (the embedded default): a SQLite file under `<repo>/.evalbot/`.

A local PR is a branch of the repository being scored, registered with `evalbot pr open`. Its
head SHA is always read live from the branch, so pushing to the branch moves the PR. The file
keeps labels, the sticky scorecard, check runs, receipts and merges, and implements the `Forge`
Protocol so the pipeline publishes to it exactly as it would to GitHub.

Every method opens its own short connection: safe for a CLI and for worker threads alike.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from evalbot.errors import ForgeError, GitError
from evalbot.forge.base import MergeResult, PullInfo
from evalbot.forge.local_db import BOT_IDENTITY, DB_NAME, SCHEMA, SCHEMA_VERSION, connect, utc_stamp
from evalbot.measure.gitops import git, ref_exists, resolve


@dataclass
class PullOverview:
    """One row of `evalbot status`."""

    pull: PullInfo
    check_status: str = ""
    check_conclusion: str = ""
    check_title: str = ""
    has_scorecard: bool = False
    scorecard_updated_at: str = ""
    receipts: int = 0


class LocalForge:
    def __init__(self, repo: Path, state_dir: Path | None = None) -> None:
        self.repo = repo
        self.state_dir = state_dir or repo / ".evalbot"
        self.db_path = self.state_dir / DB_NAME
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ignore = self.state_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# the bot's state; never committed\n*\n")
        with self._db() as db:
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _db(self) -> AbstractContextManager[sqlite3.Connection]:
        return connect(self.db_path)

    # -- who may command the bot ------------------------------------------------------------------

    PERMISSIONS_FILE = "permissions.json"  # {"login": "admin|maintain|write|triage|read|none"} under .evalbot/

    def permission(self, login: str) -> str:
        """`login`'s role, as GitHub's collaborator permission: from `.evalbot/permissions.json` when it names
        them; else the machine's own user is admin and everyone else has none. A broken file raises."""
        path = self.state_dir / self.PERMISSIONS_FILE
        if path.exists():
            try:
                table = {str(k).lower(): str(v).lower() for k, v in json.loads(path.read_text()).items()}
            except (ValueError, AttributeError) as exc:
                raise ForgeError(f"{path}: not a JSON object of login -> role: {exc}") from None
            if login.lower() in table:
                return table[login.lower()]
        return "admin" if login == getpass.getuser() else "none"

    # -- PRs ------------------------------------------------------------------------------------

    def _branch_sha(self, branch: str) -> str | None:
        if ref_exists(self.repo, f"refs/heads/{branch}"):
            return resolve(self.repo, f"refs/heads/{branch}")
        return None

    def open_pull(self, head: str, base: str = "main", title: str = "", author: str | None = None) -> PullInfo:
        """Register branch `head` as a PR against branch `base`."""
        head_sha, base_sha = self._branch_sha(head), self._branch_sha(base)
        if head_sha is None:
            raise ForgeError(f"no branch {head!r} in {self.repo}")
        if base_sha is None:
            raise ForgeError(f"no branch {base!r} in {self.repo}")
        if head == base:
            raise ForgeError("head and base are the same branch")
        with self._db() as db:
            row = db.execute(
                "SELECT number FROM pulls WHERE head_ref = ? AND base_ref = ? AND state = 'open'", (head, base)
            ).fetchone()
            if row:
                raise ForgeError(f"branch {head!r} already has open PR #{row['number']} against {base!r}")
            now = utc_stamp()
            cur = db.execute(
                "INSERT INTO pulls (head_ref, base_ref, head_sha, base_sha, title, author, state, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, 'open', ?, ?)",
                (head, base, head_sha, base_sha, title or head, author or getpass.getuser(), now, now),
            )
            number = int(cur.lastrowid or 0)
        return self.get_pull(number)

    def _pull_from_row(self, db: sqlite3.Connection, row: sqlite3.Row) -> PullInfo:
        head_sha, base_sha = row["head_sha"], row["base_sha"]
        if row["state"] == "open":
            head_sha = self._branch_sha(row["head_ref"]) or head_sha
            base_sha = self._branch_sha(row["base_ref"]) or base_sha
            if (head_sha, base_sha) != (row["head_sha"], row["base_sha"]):
                db.execute(
                    "UPDATE pulls SET head_sha = ?, base_sha = ?, updated_at = ? WHERE number = ?",
                    (head_sha, base_sha, utc_stamp(), row["number"]),
                )
        labels = [r["label"] for r in db.execute("SELECT label FROM labels WHERE number = ? ORDER BY id", (row["number"],))]
        return PullInfo(
            number=row["number"], head_sha=head_sha, head_ref=row["head_ref"], base_ref=row["base_ref"],
            base_sha=base_sha, title=row["title"], author=row["author"], author_association="OWNER",
            draft=False, state=row["state"], mergeable=None, labels=labels,
        )

    def get_pull(self, number: int) -> PullInfo:
        with self._db() as db:
            row = db.execute("SELECT * FROM pulls WHERE number = ?", (number,)).fetchone()
            if row is None:
                raise ForgeError(f"no local PR #{number}")
            return self._pull_from_row(db, row)

    def list_pulls(self, state: str | None = None) -> list[PullInfo]:
        with self._db() as db:
            if state is None:
                rows = db.execute("SELECT * FROM pulls ORDER BY number").fetchall()
            else:
                rows = db.execute("SELECT * FROM pulls WHERE state = ? ORDER BY number", (state,)).fetchall()
            return [self._pull_from_row(db, r) for r in rows]

    def list_open_pulls(self) -> list[PullInfo]:
        return self.list_pulls("open")

    def branch_head_sha(self, branch: str) -> str:
        sha = self._branch_sha(branch)
        if sha is None:
            raise ForgeError(f"no branch {branch!r} in {self.repo}")
        return sha

    def _require(self, db: sqlite3.Connection, number: int) -> None:
        if db.execute("SELECT 1 FROM pulls WHERE number = ?", (number,)).fetchone() is None:
            raise ForgeError(f"no local PR #{number}")

    # -- labels ---------------------------------------------------------------------------------

    def replace_labels(self, number: int, prefixes: tuple[str, ...], new_labels: list[str]) -> None:
        with self._db() as db:
            self._require(db, number)
            for r in db.execute("SELECT id, label FROM labels WHERE number = ?", (number,)).fetchall():
                if r["label"].startswith(tuple(prefixes)):
                    db.execute("DELETE FROM labels WHERE id = ?", (r["id"],))
            for label in new_labels:
                db.execute("INSERT OR IGNORE INTO labels (number, label) VALUES (?, ?)", (number, label))

    def add_label(self, number: int, label: str) -> None:
        with self._db() as db:
            self._require(db, number)
            db.execute("INSERT OR IGNORE INTO labels (number, label) VALUES (?, ?)", (number, label))

    def remove_label(self, number: int, label: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM labels WHERE number = ? AND label = ?", (number, label))

    # -- comments -------------------------------------------------------------------------------

    def upsert_sticky_comment(self, number: int, marker: str, body: str) -> str:
        with self._db() as db:
            self._require(db, number)
            rows = db.execute("SELECT id, body FROM comments WHERE number = ? ORDER BY id", (number,)).fetchall()
            sticky = next((r for r in rows if marker in r["body"]), None)
            now = utc_stamp()
            if sticky is not None:
                db.execute("UPDATE comments SET body = ?, updated_at = ? WHERE id = ?", (body, now, sticky["id"]))
                return str(sticky["id"])
            cur = db.execute(
                "INSERT INTO comments (number, body, created_at, updated_at) VALUES (?, ?, ?, ?)", (number, body, now, now)
            )
            return str(cur.lastrowid)

    def comment(self, number: int, body: str) -> str:
        with self._db() as db:
            self._require(db, number)
            now = utc_stamp()
            cur = db.execute(
                "INSERT INTO comments (number, body, created_at, updated_at) VALUES (?, ?, ?, ?)", (number, body, now, now)
            )
            return str(cur.lastrowid)

    def comments(self, number: int) -> list[dict]:
        with self._db() as db:
            return [dict(r) for r in db.execute("SELECT * FROM comments WHERE number = ? ORDER BY id", (number,))]

    # -- checks ---------------------------------------------------------------------------------

    def start_check(self, head_sha: str, name: str, summary: str, *, external_id: str = "", details_url: str = "") -> str:
        # external_id and details_url are GitHub's; locally `evalbot dashboard` is the details page.
        with self._db() as db:
            now = utc_stamp()
            cur = db.execute(
                "INSERT INTO checks (head_sha, name, status, summary, created_at, updated_at)"
                " VALUES (?, ?, 'in_progress', ?, ?, ?)",
                (head_sha, name, summary, now, now),
            )
            return str(cur.lastrowid)

    def update_check(
        self, check_id: str, *, status: str, title: str, summary: str, conclusion: str | None = None,
        text: str | None = None, details_url: str = "",
    ) -> None:
        with self._db() as db:
            cur = db.execute(
                "UPDATE checks SET status = ?, title = ?, summary = ?, conclusion = ?, text = ?, updated_at = ?"
                " WHERE id = ?",
                (status, title, summary, conclusion, text, utc_stamp(), int(check_id)),
            )
            if cur.rowcount == 0:
                raise ForgeError(f"no check run {check_id}")

    def checks(self, head_sha: str) -> list[dict]:
        with self._db() as db:
            return [dict(r) for r in db.execute("SELECT * FROM checks WHERE head_sha = ? ORDER BY id", (head_sha,))]

    # -- receipts -------------------------------------------------------------------------------

    def store_receipt(self, number: int, head_sha: str, receipt_json: str) -> str:
        directory = self.state_dir / "receipts"
        directory.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            self._require(db, number)
            now = utc_stamp()
            cur = db.execute(
                "INSERT INTO receipts (number, head_sha, path, body, created_at) VALUES (?, ?, '', ?, ?)",
                (number, head_sha, receipt_json, now),
            )
            rid = int(cur.lastrowid or 0)
            path = directory / f"pr{number}-{head_sha[:12]}-{rid}.intoto.json"
            path.write_text(receipt_json if receipt_json.endswith("\n") else receipt_json + "\n")
            db.execute("UPDATE receipts SET path = ? WHERE id = ?", (str(path), rid))
        return str(path)

    def receipts(self, number: int) -> list[dict]:
        with self._db() as db:
            return [dict(r) for r in db.execute("SELECT * FROM receipts WHERE number = ? ORDER BY id", (number,))]

    # -- merge / close --------------------------------------------------------------------------

    def _checked_out_in(self, branch: str) -> Path | None:
        current: Path | None = None
        for line in git(self.repo, "worktree", "list", "--porcelain").splitlines():
            if line.startswith("worktree "):
                current = Path(line[len("worktree ") :])
            elif line == f"branch refs/heads/{branch}":
                return current
        return None

    def merge(self, number: int, expected_head_sha: str, title: str, message: str) -> MergeResult:
        """Squash-merge: one new commit on the base branch with the PR's tree merged in."""
        pull = self.get_pull(number)
        if pull.state != "open":
            return MergeResult(False, message=f"PR #{number} is {pull.state}")
        if pull.head_sha != expected_head_sha:
            return MergeResult(False, message=f"head moved: {pull.head_sha[:12]} is not the scored {expected_head_sha[:12]}")
        try:  # exits non-zero on a conflict
            tree = git(self.repo, "merge-tree", "--write-tree", pull.base_sha, pull.head_sha).splitlines()[0].strip()
        except GitError:
            return MergeResult(False, message="the PR does not merge cleanly into its base")
        env = {} if git(self.repo, "config", "user.email", check=False).strip() else BOT_IDENTITY
        try:
            commit = git(
                self.repo, "commit-tree", tree, "-p", pull.base_sha, "-m", f"{title}\n\n{message}".strip(), extra_env=env
            ).strip()
            worktree = self._checked_out_in(pull.base_ref)
            if worktree is not None:
                git(worktree, "merge", "--ff-only", "--quiet", commit)
            else:
                git(self.repo, "update-ref", f"refs/heads/{pull.base_ref}", commit, pull.base_sha)
        except GitError as e:
            return MergeResult(False, message=f"could not update {pull.base_ref}: {e}")
        with self._db() as db:
            now = utc_stamp()
            db.execute(
                "INSERT INTO merges (number, head_sha, base_ref, merge_sha, title, message, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (number, expected_head_sha, pull.base_ref, commit, title, message, now),
            )
            db.execute("UPDATE pulls SET state = 'merged', updated_at = ? WHERE number = ?", (now, number))
        return MergeResult(True, sha=commit, message=f"squash-merged into {pull.base_ref}")

    def merges(self) -> list[dict]:
        with self._db() as db:
            return [dict(r) for r in db.execute("SELECT * FROM merges ORDER BY id")]

    def close(self, number: int) -> None:
        with self._db() as db:
            self._require(db, number)
            db.execute(
                "UPDATE pulls SET state = 'closed', updated_at = ? WHERE number = ? AND state = 'open'", (utc_stamp(), number)
            )

    # -- overview -------------------------------------------------------------------------------

    def overview(self, marker: str) -> list[PullOverview]:
        rows = []
        for pull in self.list_pulls():
            ov = PullOverview(pull=pull)
            checks = self.checks(pull.head_sha)
            if checks:
                last = checks[-1]
                ov.check_status, ov.check_conclusion, ov.check_title = last["status"], last["conclusion"] or "", last["title"]
            sticky = [c for c in self.comments(pull.number) if marker in c["body"]]
            if sticky:
                ov.has_scorecard, ov.scorecard_updated_at = True, sticky[0]["updated_at"]
            ov.receipts = len(self.receipts(pull.number))
            rows.append(ov)
        return rows
