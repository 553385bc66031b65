-- The primary keys compare their most telling column first. A B-tree compares
-- a key column by column, and with the space (or the sender) first, every
-- comparison inside one space's range compared two or three equal texts before
-- the one that differs: a fifth of the database's CPU under pushes went to
-- comparing keys. Every statement finds a row or a verdict by its whole key,
-- so the order is free: a row's id, its table, its space; an op's id, its
-- sender. Reads of one space go through rows_space_seq (a pull, a count).
-- Rebuilding both keys locks the two tables while it runs (BENCHMARKS.md,
-- "PostgreSQL's primary keys, most telling column first").
ALTER TABLE rows DROP CONSTRAINT rows_pkey;
ALTER TABLE rows ADD PRIMARY KEY (row_id, table_name, space_id);
ALTER TABLE verdicts DROP CONSTRAINT verdicts_pkey;
ALTER TABLE verdicts ADD PRIMARY KEY (op_id, user_id);
