"""Access rules, stored as validated JSON documents."""

from __future__ import annotations

import json

from sqlalchemy import Connection, delete, insert, select, update

from ..errors import NotFound
from ..model import utcnow
from ..model.errand import Errand
from ..model.rules import Rule, parse_rule
from .database import Database
from .schema import rules


def read_rules(conn: Connection) -> list[Rule]:
    """Every access rule, in the transaction of `conn`."""
    rows = conn.execute(select(rules.c.id, rules.c.spec).order_by(rules.c.id)).all()
    return [parse_rule(json.loads(row.spec), row.id) for row in rows]


class Rules:
    """Allow-rules; read on every check so that all replicas see the same set."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def all(self) -> list[Rule]:
        with self.db.read() as conn:
            return read_rules(conn)

    def get(self, rule_id: int) -> Rule:
        with self.db.read() as conn:
            spec = conn.execute(select(rules.c.spec).where(rules.c.id == rule_id)).scalar()
        if spec is None:
            raise NotFound(f"There is no access rule {rule_id}.")
        return parse_rule(json.loads(spec), rule_id)

    def add(self, rule: Rule, by: str, errand: Errand | None = None) -> Rule:
        """Store a new rule (`errand`: the API request it is part of)."""
        now = utcnow()

        def work(conn: Connection) -> int:
            return int(
                conn.execute(
                    insert(rules).values(
                        created_by=by, created_at=now, updated_at=now, **_columns(rule)
                    )
                ).inserted_primary_key[0]  # type: ignore[index]
            )

        rule_id = self.db.write(work, errand=errand)
        return parse_rule(rule.to_json(), rule_id)

    def replace(self, rule_id: int, rule: Rule) -> Rule:
        def work(conn: Connection) -> None:
            done = conn.execute(
                update(rules)
                .where(rules.c.id == rule_id)
                .values(updated_at=utcnow(), **_columns(rule))
            )
            if not done.rowcount:
                raise NotFound(f"There is no access rule {rule_id}.")

        self.db.write(work)
        return parse_rule(rule.to_json(), rule_id)

    def remove(self, rule_id: int) -> None:
        def work(conn: Connection) -> None:
            if not conn.execute(delete(rules).where(rules.c.id == rule_id)).rowcount:
                raise NotFound(f"There is no access rule {rule_id}.")

        self.db.write(work)


def _columns(rule: Rule) -> dict[str, object]:
    spec = rule.to_json()
    spec.pop("id")
    return {
        "name": rule.name,
        "spec": json.dumps(spec, sort_keys=True),
        "valid_from": rule.valid_from,
        "valid_until": rule.valid_until,
    }
