-- A small shop: customers, products, orders and their lines. Built into shop.sqlite by rlf_nl2sql.shop.
CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT,
  joined TEXT NOT NULL
);
CREATE TABLE products (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  category TEXT NOT NULL,
  price REAL NOT NULL
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  ordered_on TEXT NOT NULL,
  status TEXT NOT NULL
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders(id),
  product_id INTEGER NOT NULL REFERENCES products(id),
  quantity INTEGER NOT NULL
);

INSERT INTO customers VALUES
  (1, 'Ada Lovelace', 'London', '2023-01-15'),
  (2, 'Alan Turing', 'Manchester', '2023-02-03'),
  (3, 'Grace Hopper', 'New York', '2023-03-22'),
  (4, 'Edsger Dijkstra', 'Amsterdam', '2023-05-09'),
  (5, 'Barbara Liskov', 'Boston', '2023-07-30'),
  (6, 'Donald Knuth', NULL, '2023-09-12'),
  (7, 'Frances Allen', 'New York', '2024-01-05'),
  (8, 'John Backus', 'London', '2024-02-18');

INSERT INTO products VALUES
  (1, 'Notebook', 'stationery', 3.5),
  (2, 'Fountain pen', 'stationery', 24.0),
  (3, 'Pencil set', 'stationery', 6.25),
  (4, 'Desk lamp', 'furniture', 39.9),
  (5, 'Office chair', 'furniture', 149.0),
  (6, 'Bookshelf', 'furniture', 89.5),
  (7, 'USB keyboard', 'electronics', 29.99),
  (8, 'Monitor', 'electronics', 199.0),
  (9, 'Headphones', 'electronics', 59.0),
  (10, 'Coffee mug', 'kitchen', 8.0),
  (11, 'Stapler', 'stationery', 12.75);

INSERT INTO orders VALUES
  (1, 1, '2024-01-10', 'shipped'),
  (2, 1, '2024-03-02', 'shipped'),
  (3, 2, '2024-01-21', 'cancelled'),
  (4, 3, '2024-02-14', 'shipped'),
  (5, 3, '2024-04-01', 'pending'),
  (6, 4, '2024-02-28', 'shipped'),
  (7, 5, '2024-03-15', 'shipped'),
  (8, 7, '2024-03-20', 'pending'),
  (9, 8, '2024-04-11', 'shipped'),
  (10, 3, '2024-05-05', 'shipped'),
  (11, 2, '2024-05-19', 'shipped'),
  (12, 5, '2024-06-01', 'pending');

INSERT INTO order_items VALUES
  (1, 1, 4), (1, 2, 1),
  (2, 8, 1), (2, 7, 1),
  (3, 5, 1),
  (4, 3, 2), (4, 10, 3),
  (5, 9, 1),
  (6, 4, 1), (6, 1, 10),
  (7, 6, 2),
  (8, 2, 2), (8, 10, 1),
  (9, 7, 1),
  (10, 8, 2), (10, 4, 1),
  (11, 1, 5),
  (12, 5, 1), (12, 9, 2);
