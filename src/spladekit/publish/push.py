"""Upload a saved model folder to the Hugging Face hub: ``huggingface_hub.create_repo`` then
``upload_folder`` (``create_branch`` first for a ``revision`` that is not a pull request's base).

Before anything is sent the folder is checked: a model folder (``config.json``, ``modules.json`` or
``model.onnx``) with a ``README.md`` that ``huggingface_hub.ModelCard`` parses. Hidden files
(``.name``: temporary files of atomic writes) are not uploaded, nor what ``upload_folder`` itself
ignores (``.git/``, ``.cache/huggingface/``). Nothing in the folder is written, by a dry run or a
push, whatever happens; the token is ``huggingface_hub``'s own (``HF_TOKEN`` or ``hf auth login``).

Only files inside the folder leave the machine: a symbolic link whose target lies outside the folder
(a file or a folder, or a dangling link) is refused by name before anything is sent, since
``upload_folder`` would follow it and send the target's bytes. The files are listed as
``upload_folder`` lists them (``Path.glob("**/*")`` regular files, links followed, filtered by
``huggingface_hub.utils.filter_repo_objects``), and the push sends exactly that list in one
``create_commit``: what ``--dry-run`` shows is what is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spladekit.errors import SpladekitError

#: files and folders not uploaded, besides ``huggingface_hub``'s ``DEFAULT_IGNORE_PATTERNS``
IGNORE_PATTERNS = (".*", "*/.*")
MODEL_MARKERS = ("config.json", "modules.json", "model.onnx")


class PushError(SpladekitError, RuntimeError):
    """The hub could not be reached, or refused a step (one line: the endpoint and the cause)."""


@dataclass
class PushPlan:
    """What a push sends: ``files`` (path in the repo, bytes; each the file ``folder / path``), the card's text, where to."""

    folder: Path
    repo_id: str
    files: list[tuple[str, int]]
    card: str
    endpoint: str
    private: bool = False
    revision: str | None = None
    create_pr: bool = False

    def operations(self) -> list:
        """``huggingface_hub.CommitOperationAdd`` of every file of ``files``, in order: the commit a push sends."""
        from huggingface_hub import CommitOperationAdd

        root = self.folder.expanduser().resolve()
        return [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(root / name)) for name, _ in self.files]

    def describe(self) -> str:
        """The dry run's listing: target, every file with its size, then the card."""
        total = sum(size for _, size in self.files)
        where = f"{self.endpoint}/{self.repo_id}" + (f" (revision {self.revision})" if self.revision else "")
        lines = [
            f"would push {self.folder} to {where}"
            + (" as a pull request" if self.create_pr else "")
            + (", private" if self.private else "")
            + f": {len(self.files)} files, {total:,} bytes"
        ]
        lines += [f"  {size:>12,}  {name}" for name, size in self.files]
        lines += ["", "README.md (model card):", self.card.rstrip("\n")]
        return "\n".join(lines)


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def plan_push(
    folder: str | Path, repo_id: str, *, private: bool = False, revision: str | None = None, create_pr: bool = False
) -> PushPlan:
    """Check ``folder`` and list what :func:`push_folder` would upload (reads only; no network).

    Raises:
        ValueError: ``repo_id`` is not a valid hub repo id (``name`` or ``namespace/name``).
        FileNotFoundError: ``folder`` is not a folder.
        SpladekitError (DataFormatError): not a model folder, or no ``README.md`` (``spladekit card
            FOLDER`` writes it), or a ``README.md`` whose front matter does not parse or whose
            ``license`` the Hub refuses (not a Hub identifier; ``other`` without ``license_name``).
        DataFormatError: a link out of the folder (:func:`folder_files`).
    """
    from huggingface_hub import ModelCard

    from spladekit.errors import DataFormatError
    from spladekit.publish.licenses import license_problem

    check_repo_id(repo_id)
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not a folder (give a saved model folder)")
    if not any((folder / name).is_file() for name in MODEL_MARKERS):
        raise DataFormatError(folder, f"not a model folder (no {' or '.join(MODEL_MARKERS)})")
    card_path = folder / "README.md"
    if not card_path.is_file():
        raise DataFormatError(card_path, f"no model card; write one with `spladekit card {folder}`")
    try:
        card = ModelCard.load(card_path)
    except Exception as exc:
        raise DataFormatError(card_path, f"the model card does not parse ({type(exc).__name__}: {exc})") from None
    if getattr(card.data, "license", None) is not None:  # the Hub would refuse the upload
        problem = license_problem(card.data.license, getattr(card.data, "license_name", None))
        if problem:
            raise DataFormatError(card_path, problem, field="license")
    files = [(name, path.stat().st_size) for name, path in folder_files(folder).items()]
    return PushPlan(folder, repo_id, files, str(card), _endpoint(), private, revision, create_pr)


def folder_files(folder: str | Path) -> dict[str, Path]:
    """``{path in the repo: file}`` of what a push of ``folder`` uploads: ``upload_folder``'s own listing
    (see the module docstring) less :data:`IGNORE_PATTERNS`, after refusing links out of the folder.

    Raises:
        DataFormatError: a link (not ignored) whose target is outside ``folder``, naming it and its target.
    """
    from huggingface_hub.utils import filter_repo_objects
    from huggingface_hub.utils._paths import DEFAULT_IGNORE_PATTERNS

    patterns = [*IGNORE_PATTERNS, *DEFAULT_IGNORE_PATTERNS]
    root = Path(folder).expanduser().resolve()
    _refuse_links_out(root, patterns)
    every = {p.relative_to(root).as_posix(): p for p in sorted(root.glob("**/*")) if p.is_file()}
    return {name: every[name] for name in filter_repo_objects(list(every), ignore_patterns=patterns)}


def _refuse_links_out(root: Path, patterns: list[str]) -> None:
    """Raise for the first link under ``root`` (a file's or a folder's, not matched by ``patterns``)
    whose target is outside ``root`` or missing."""
    import os

    from huggingface_hub.utils import filter_repo_objects

    from spladekit.errors import DataFormatError

    links = []
    for here, folders, files in os.walk(root):  # links to folders are listed, not entered
        for name in folders + files:
            path = Path(here) / name
            if path.is_symlink():
                links.append(path.relative_to(root).as_posix())
    for name in filter_repo_objects(links, ignore_patterns=patterns):
        target = Path(os.path.realpath(root / name))
        if not target.exists() or not target.is_relative_to(root):
            where = "a missing file" if not target.exists() else "outside the folder"
            raise DataFormatError(
                root / name,
                f"a link to {os.readlink(root / name)} ({where}); a push sends only the "
                "files inside the folder: replace the link by the file it points to, or remove it",
            )


def _unreachable(exc: BaseException) -> bool:
    """True for a transport failure (no connection, DNS, timeout): the hub was never reached. By class
    name along the MRO, since the client library varies across huggingface_hub versions (requests,
    httpx, httpx2): its ``TransportError`` / ``ConnectionError`` / ``Timeout``, or an ``OSError`` cause."""
    seen = 0
    while exc is not None and seen < 8:
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"TransportError", "ConnectionError", "ConnectTimeout", "Timeout", "TimeoutException"} or isinstance(
            exc, OSError
        ):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _hub_failure(step: str, exc: Exception) -> PushError:
    """One line naming the endpoint, the step and the cause (no traceback, no request dump)."""
    cause = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    detail = f"{step}: {type(exc).__name__}" + (f": {cause}" if cause else "")
    if _unreachable(exc):
        return PushError(f"cannot reach the Hugging Face hub at {_endpoint()} ({detail}); nothing was uploaded")
    return PushError(f"the Hugging Face hub at {_endpoint()} refused {detail}")


def push_folder(plan: PushPlan, token: str | None = None) -> str:
    """Send ``plan`` (:func:`plan_push`): create the repository (kept if it exists), the branch
    ``revision`` when given without ``create_pr``, then upload exactly ``plan.files`` in one commit
    (``create_commit``; a file added to the folder since the plan is not sent).

    Returns:
        The URL of the commit (or of the pull request with ``create_pr``).

    Raises:
        PushError: the hub was not reachable or refused a step (the local folder is untouched).
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(plan.repo_id, private=plan.private, exist_ok=True, repo_type="model")
    except Exception as exc:  # httpx transport errors, HfHubHTTPError (401, 403, ...)
        raise _hub_failure("create_repo", exc) from None
    if plan.revision and not plan.create_pr:
        try:
            api.create_branch(plan.repo_id, branch=plan.revision, exist_ok=True, repo_type="model")
        except Exception as exc:
            raise _hub_failure(f"create_branch {plan.revision!r}", exc) from None
    try:
        info = api.create_commit(
            repo_id=plan.repo_id,
            operations=plan.operations(),
            repo_type="model",
            revision=plan.revision,
            create_pr=plan.create_pr,
            commit_message=f"Upload {plan.folder.name} with spladekit",
        )
    except Exception as exc:
        raise _hub_failure("create_commit", exc) from None
    return str(getattr(info, "pr_url", None) or getattr(info, "commit_url", info))


def check_repo_id(repo_id: str, what: str = "REPO_ID") -> str:
    """``repo_id`` when it is a valid hub repo id (``huggingface_hub.utils.validate_repo_id``).

    Raises:
        ValueError: naming ``what`` and the validator's reason.
    """
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except Exception as exc:  # HFValidationError
        raise ValueError(f"{what} {repo_id!r}: {exc}") from None
    return repo_id
