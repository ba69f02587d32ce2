export interface Point {
  x: number;
  y: number;
}

export interface Arrays {
  names: string[];
  scores: Array<number>;
  frozen: readonly string[];
  frozenToo: ReadonlyArray<boolean>;
  grid: number[][];
  points: Point[];
  pair: [string, number];
  named: [label: string, weight?: number];
  optional: [string, number?, boolean?];
  rest: [string, ...number[]];
  empty: [];
  readonlyPair: readonly [number, number];
}
