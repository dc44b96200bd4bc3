"""Storage: SQLAlchemy 2 Core tables, the portable store, dialect bits and Alembic migrations."""
