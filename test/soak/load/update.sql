-- a new vector for a row: a deleted node and a pending row in the index
UPDATE items SET v = soak_vector(c) WHERE id = (SELECT id FROM items
	WHERE id >= (SELECT random() * max(id) FROM items) ORDER BY id LIMIT 1);
