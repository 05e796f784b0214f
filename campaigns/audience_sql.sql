-- Queries over an operator's --audience-sql query (campaigns/sql_audience.py). {query} is
-- the operator's SELECT, {user_id} its user_id column; composed with psycopg.sql.

-- name: describe
-- The query's columns, without reading a row.
SELECT * FROM ({query}) AS audience LIMIT 0

-- name: first_page
-- Keyset pagination by user_id, in the column's own type and order: each page is an
-- index range scan when the application's table has an index on it.
SELECT * FROM ({query}) AS audience
WHERE audience.{user_id} IS NOT NULL
ORDER BY audience.{user_id}
LIMIT %(page)s

-- name: next_page
SELECT * FROM ({query}) AS audience
WHERE audience.{user_id} > %(after)s
ORDER BY audience.{user_id}
LIMIT %(page)s
