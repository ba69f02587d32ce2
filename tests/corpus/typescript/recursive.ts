/** A tree of categories. */
export interface Category {
  name: string;
  children: Category[];
  parent?: CategoryRef;
}

export interface CategoryRef {
  name: string;
  category?: Category;
}

export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

export interface Recursive {
  root: Category;
  list: LinkedList;
  data: Json;
}

export interface LinkedList {
  value: number;
  next: LinkedList | null;
}
