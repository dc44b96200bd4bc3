-- The reference of FACTS.md: a two-transaction payment at its smallest (INSERT, then a
-- conditional UPDATE, each its own autocommit transaction) on a table with the same keys as
-- `payments` (primary key + unique (merchant_id, biz_no)). Table: see bench/scenarios/sql_floor.py.
-- Run with: pgbench -n -M prepared -f <this file> -c N -j min(N,2) -T secs
\set bench_pay random(1, 1000000000000000000)
INSERT INTO bench_min_payments (id, merchant_id, biz_no, amount, status) VALUES (:bench_pay, 'mch_bench', 'BZ' || :bench_pay::text, 19900, 'PROCESSING');
UPDATE bench_min_payments SET status = 'SUCCESS', version = version + 1 WHERE id = :bench_pay AND status = 'PROCESSING';
