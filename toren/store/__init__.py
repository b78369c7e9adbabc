"""The one store (`TOREN_STORE`: a directory or S3) and what lives in it, read by every side.

`_store` opens it (a directory; `_s3` for a bucket), and every kind keeps `_objects.Store`;
`_attachments` parses files into it (`_parsers`) for `read_attachment`; `_workspace` keeps a
run's workspace as content-addressed versions (`_manifest`), its copy on a worker read by
`_tree` in the directory `_workspace_dirs` names;
`_payloads` is Temporal's `ExternalStorage` over it, for payloads too large for history;
`_retention` prunes closed runs' objects. A client uploads attachments and downloads
workspaces; a worker reads and writes both. Imports `agent` and `toren.errors` only.
"""

__all__: list[str] = []
