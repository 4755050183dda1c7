"""Talking to PostgreSQL through psql and pgbench subprocesses (no client library needed,
so the suite runs wherever the PostgreSQL client programs do, the GPU machine included).

Connection parameters come from the usual PG* environment variables, or from a libpq
key=value connection string; a database name is appended to it to pick the database.
"""
import os
import shutil
import struct
import subprocess

import numpy as np

from .progress import Progress


class PgError(RuntimeError):
    pass


def find_program(name, pgbin=None):
    for folder in (pgbin, os.environ.get("PGBIN")):
        if folder and os.access(os.path.join(folder, name), os.X_OK):
            return os.path.join(folder, name)
    found = shutil.which(name)
    if not found:
        raise PgError("%s not found (give --pgbin or put it on PATH)" % name)
    return found


class Server:
    """One PostgreSQL server; `session_options` (name -> value) are set in every
    connection through PGOPTIONS."""

    def __init__(self, dsn="", pgbin=None, session_options=None):
        self.dsn = dsn
        self.psql = find_program("psql", pgbin)
        self.pgbench = find_program("pgbench", pgbin)
        self.session_options = dict(session_options or {})

    def conninfo(self, database):
        return ("%s dbname=%s" % (self.dsn, database)).strip()

    def environment(self, settings=None):
        env = dict(os.environ)
        options = dict(self.session_options)
        options.update(settings or {})
        env["PGOPTIONS"] = " ".join("-c %s=%s" % (k, v) for k, v in options.items())
        return env

    def _psql_args(self, database):
        return [self.psql, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
                "-d", self.conninfo(database)]

    def query(self, database, sql, settings=None):
        """Rows (lists of strings) printed by the statements of `sql`, in order."""
        done = subprocess.run(self._psql_args(database), input=sql, text=True,
                              capture_output=True, env=self.environment(settings))
        if done.returncode != 0:
            raise PgError("psql failed on %r:\n%s" % (sql[:300], done.stderr.strip()))
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def value(self, database, sql, settings=None):
        rows = self.query(database, sql, settings)
        return rows[0][0] if rows else None

    def start(self, database, sql, settings=None):
        """Runs `sql` in the background; returns the Popen (stdout/stderr captured)."""
        proc = subprocess.Popen(self._psql_args(database), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.environment(settings))
        proc.stdin.write(sql)
        proc.stdin.close()
        return proc

    def copy_in(self, database, table, copy_format, chunks, total_bytes, label):
        """COPY `table` FROM STDIN, feeding the byte chunks and showing progress."""
        sql = "COPY %s FROM STDIN WITH (FORMAT %s)" % (table, copy_format)
        proc = subprocess.Popen(self._psql_args(database) + ["-c", sql],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.environment())
        meter = Progress(label, total_bytes, unit="MB", scale=1e-6)
        sent = 0
        try:
            for chunk in chunks:
                proc.stdin.write(chunk)
                sent += len(chunk)
                meter.update(sent)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        err = proc.stderr.read().decode(errors="replace")
        if proc.wait() != 0:
            raise PgError("%s failed:\n%s" % (sql, err.strip()))
        meter.finish()


def copy_binary_chunks(ids, vectors, rows_per_chunk=8192):
    """COPY BINARY stream of (int4 id, vector) rows. A vector's binary form is pgvector's:
    int16 dimensions, int16 unused, then the float4 values, all big-endian."""
    dim = vectors.shape[1]
    record = np.dtype([("fields", ">i2"), ("id_len", ">i4"), ("id", ">i4"), ("vec_len", ">i4"),
                       ("dim", ">i2"), ("unused", ">i2"), ("values", ">f4", (dim,))])
    yield b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    for start in range(0, len(ids), rows_per_chunk):
        part = np.zeros(min(rows_per_chunk, len(ids) - start), dtype=record)
        part["fields"] = 2
        part["id_len"] = 4
        part["id"] = ids[start:start + len(part)]
        part["vec_len"] = 4 + 4 * dim
        part["dim"] = dim
        part["values"] = vectors[start:start + len(part)]
        yield part.tobytes()
    yield struct.pack(">h", -1)


def copy_text_chunks(ids, vectors, rows_per_chunk=4096):
    """COPY text stream of (id, '[v1,...]') rows; %.9g keeps every float4 bit."""
    for start in range(0, len(ids), rows_per_chunk):
        lines = ["%d\t[%s]\n" % (i, ",".join("%.9g" % x for x in row))
                 for i, row in zip(ids[start:start + rows_per_chunk],
                                   vectors[start:start + rows_per_chunk].tolist())]
        yield "".join(lines).encode()


def copy_stream_size(fmt, rows, dim):
    """Bytes of a binary COPY stream; an estimate (about 12 characters a value) for text."""
    if fmt == "binary":
        return 19 + rows * (2 + 4 + 4 + 4 + 4 + 4 * dim) + 2
    return rows * (dim * 12 + 10)
