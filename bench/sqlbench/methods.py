"""The search methods compared: an exact scan, the tsdg index, and pgvector's HNSW when
pgvector happens to be installed. Each says where its table lives, how its index is
built, and which session settings its sweep visits."""
from dataclasses import dataclass, field
import itertools


@dataclass
class Method:
    name: str
    database: str
    extension: str
    index_name: str = ""           # empty: no index (exact scan)
    index_sql: str = ""
    index_options: str = ""        # as shown in the results
    # settings of every query session of this method
    query_settings: dict = field(default_factory=dict)
    # one dict of settings per point of the sweep
    sweep: list = field(default_factory=list)

    @property
    def uses_index(self):
        return bool(self.index_name)


def exact(database):
    # The exact answer is a sequential scan: keep the planner off any index on the table.
    return Method(name="exact scan", database=database, extension="pg_tsdg",
                  query_settings={"enable_indexscan": "off", "enable_bitmapscan": "off"},
                  sweep=[{}])


def tsdg(database, options, ef_values, lambda_values):
    with_clause = " WITH (%s)" % options if options else ""
    sweep = [dict({"tsdg.ef_search": ef}, **({"tsdg.lambda_search": lam} if lam is not None else {}))
             for lam, ef in itertools.product(lambda_values or [None], ef_values)]
    return Method(name="tsdg", database=database, extension="pg_tsdg",
                  index_name="items_tsdg_idx",
                  index_sql="CREATE INDEX items_tsdg_idx ON items USING tsdg "
                            "(embedding vector_l2_ops)%s" % with_clause,
                  index_options=options or "defaults",
                  query_settings={"enable_seqscan": "off"}, sweep=sweep)


def pgvector_hnsw(database, ef_values):
    return Method(name="pgvector hnsw", database=database, extension="vector",
                  index_name="items_hnsw_idx",
                  index_sql="CREATE INDEX items_hnsw_idx ON items USING hnsw "
                            "(embedding vector_l2_ops) WITH (m = 16, ef_construction = 64)",
                  index_options="m = 16, ef_construction = 64",
                  query_settings={"enable_seqscan": "off"},
                  sweep=[{"hnsw.ef_search": ef} for ef in ef_values])


def setting_label(settings):
    """'ef_search=40 lambda_search=2' for the table and the plots."""
    return " ".join("%s=%s" % (k.split(".")[-1], v) for k, v in settings.items()) or "-"
