"""Query helpers for reading many results' measurements by result id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Lookup

if TYPE_CHECKING:  # the stubs' names
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType


class AmongIds(Lookup):
    """`lhs` is one of the ids the subquery on its right returns (`AmongIds(F("result_id"),
    Subquery(results.values("id")))`). On PostgreSQL `lhs = ANY(ARRAY(subquery))`: the ids become one
    array, and the rows, read in `lhs` order, come through the (result, name) index, one probe per
    result with the names filtered, whatever the history in the table. The other forms let the planner
    scan: `IN (subquery)` or a join on the results became a hash join over every measurement of the
    month once the run's share of them looked large, a list of the ids cost planning time per id,
    and with the names in the index condition it probed once per name too. Elsewhere `IN`."""

    lookup_name = "among_ids"

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _AsSqlType:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} IN {rhs}", (*lhs_params, *rhs_params)

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _AsSqlType:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY(ARRAY{rhs})", (*lhs_params, *rhs_params)
