"""Query helpers for reading many results' measurements by result id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import CharField, Func, Lookup

if TYPE_CHECKING:  # the stubs' names
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType


class AmongIds(Lookup):
    """`lhs` is one of the ids the subquery on its right returns (`AmongIds(F("result_id"),
    Subquery(results.values("id")))`). On PostgreSQL `lhs = ANY(ARRAY(subquery))`: the ids become one
    array, and the rows come through the (result, name) index, one probe per result, whatever the
    history in the table (test a list of names with `Unindexed`, or it probes once per name too).
    The other forms let the planner scan: `IN (subquery)` or a join on the results became a hash
    join over every measurement of the month once the run's share of them looked large, and a list
    of the ids cost planning time per id. Elsewhere `IN`."""

    lookup_name = "among_ids"

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _AsSqlType:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} IN {rhs}", (*lhs_params, *rhs_params)

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _AsSqlType:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY(ARRAY{rhs})", (*lhs_params, *rhs_params)


class Unindexed(Func):
    """A text column as a value no index matches (`name || ''`): `Unindexed("name")` in a filter
    beside `AmongIds` keeps the names out of the index condition. PostgreSQL before 17 probes a
    (result, name) index once per (id, name) pair when both are lists: 637,500 probes and 1.9 M
    buffer reads for 18,750 results and 34 names, against 18,750 probes with the names tested on
    the rows each probe brings (1.5 s -> 0.7 s at 1,250 nodes x 20 checks)."""

    template = "(%(expressions)s || '')"
    output_field = CharField()
