-- Nothing for SQLite: its keys keep their order (PostgreSQL's 0008 puts the
-- most telling column first; SQLite compares a key's columns as one record).
SELECT 1;
